#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace dllm {

Scheduler::Scheduler(const SchedulerConfig& config, const ModelConfig& model, Backend& backend)
    : config_(config), model_(model), backend_(backend), pool_(backend.kv_pool()) {
  if (config_.max_running <= 0) fail("max running sequences must be positive");
  if (config_.max_batch_rows <= 0) fail("max batch rows must be positive");
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(std::move(seq));
}

bool Scheduler::cancel(uint64_t id) {
  auto by_id = [id](const std::unique_ptr<Sequence>& s) { return s->id() == id; };
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), by_id); it != waiting_.end()) {
    std::unique_ptr<Sequence> owned = std::move(*it);
    waiting_.erase(it);
    owned->finish("cancelled");  // after leaving the queue: see retire()
    return true;
  }
  if (auto it = std::find_if(running_.begin(), running_.end(), by_id); it != running_.end()) {
    retire(**it, "cancelled", "");
    return true;
  }
  return false;
}

StepBatch Scheduler::schedule() {
  StepBatch batch;
  std::set<Sequence*> planned;
  int64_t rows = 0;
  auto room = [&] { return batch.sequences.empty() || rows < config_.max_batch_rows; };
  for (size_t i = 0; i < running_.size() && room();) {
    Sequence& s = *running_[i];
    if (!plan_running(s, planned)) continue;  // it left running_ (waits again, or finished)
    planned.insert(&s);
    batch.sequences.push_back(&s);
    rows += s.planned_rows();
    ++i;
  }
  // Sequences left out for lack of rows go first next step.
  std::stable_partition(running_.begin(), running_.end(),
                        [&](const auto& s) { return !planned.count(s.get()); });
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < config_.max_running &&
         room()) {
    Sequence& s = *waiting_.front();
    const Admission a = admit(s);
    if (a == Admission::kNoRoom) break;
    if (a == Admission::kFailed) continue;  // it finished with an error and is gone
    batch.sequences.push_back(&s);
    rows += s.planned_rows();
  }
  return batch;
}

bool Scheduler::plan_running(Sequence& s, const std::set<Sequence*>& planned) {
  try {
    if (!s.plan(backend_)) {
      retire(s, s.result().finish_reason, s.result().error);
      return false;
    }
    const int64_t need = s.pages_needed();
    while (need > pool_.available_pages()) {
      // The newest running sequence not planned this step makes room.
      Sequence* victim = nullptr;
      for (auto& r : running_)
        if (r.get() != &s && !planned.count(r.get()) &&
            (!victim || r->arrival_order() > victim->arrival_order()))
          victim = r.get();
      if (!victim) break;
      preempt(*victim);
    }
    if (need > pool_.available_pages()) {
      if (planned.empty() && running_.size() == 1)
        fail("the KV pool (", pool_.num_pages(), " pages of ", pool_.page_size(),
             " slots) cannot hold this sequence's next step (", need,
             " more pages); give the engine more KV cache memory");
      preempt(s);  // older sequences hold the pages; wait for them
      return false;
    }
    s.reserve_pages();
    return true;
  } catch (const Error& e) {
    retire(s, "error", e.what());
    return false;
  }
}

Scheduler::Admission Scheduler::admit(Sequence& s) {
  try {
    s.start(model_, backend_);
    check_fits(s);
    if (!s.plan(backend_)) fail("the decoder planned no forward");
    if (config_.prefix_sharing) s.share_prefix();
    // A small reserve keeps a new admission from forcing a preemption at the very next step.
    const int64_t reserve = running_.empty() ? 0 : pool_.num_pages() / 100;
    if (s.pages_needed() + reserve > pool_.available_pages()) {
      s.reset(/*preempted=*/false);
      return Admission::kNoRoom;
    }
    s.reserve_pages();
  } catch (const Error& e) {
    std::unique_ptr<Sequence> owned = std::move(waiting_.front());
    waiting_.pop_front();
    owned->finish("error", e.what());  // after leaving the queue: see retire()
    return Admission::kFailed;
  }
  s.status = SequenceStatus::kRunning;
  running_.push_back(std::move(waiting_.front()));
  waiting_.pop_front();
  return Admission::kAdmitted;
}

void Scheduler::check_fits(Sequence& s) const {
  const Decoder& d = s.decoder();
  const int64_t page = pool_.page_size();
  // The cache at its largest plus room for a step's scratch rows (a block, S2D2's 2L verifier,
  // WeDLM's 2W window), or the scratch canvas of a cache-less strategy (two with LLaDA's
  // classifier-free guidance).
  const int64_t scratch = 64 + 2 * std::min<int64_t>(s.request().params.block_length, 128);
  const int64_t canvas =
      static_cast<int64_t>(s.request().prompt.size()) + s.request().params.max_tokens;
  const int64_t slots = d.cache_capacity() > 0 ? d.cache_capacity() + scratch : 2 * canvas;
  const int64_t pages = (slots + page - 1) / page;
  if (pages > pool_.num_pages())
    fail("the request needs up to ", pages, " KV pages of ", page, " slots (", slots,
         " slots for a prompt of ", s.request().prompt.size(), " tokens and max_tokens ",
         s.request().params.max_tokens, "); the KV pool has ", pool_.num_pages(),
         " pages: shorten the request or give the engine more KV cache memory");
}

void Scheduler::preempt(Sequence& s) {
  s.reset(/*preempted=*/true);
  s.status = SequenceStatus::kWaiting;
  ++preemptions_;
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const auto& r) { return r.get() == &s; });
  waiting_.push_front(std::move(*it));
  running_.erase(it);
}

void Scheduler::retire(Sequence& s, std::string reason, std::string error) {
  // Out of the running list before finish() reports the result, so a waiter woken by it reads
  // engine statistics that no longer count this sequence as running.
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const auto& r) { return r.get() == &s; });
  std::unique_ptr<Sequence> owned = std::move(*it);
  running_.erase(it);
  owned->finish(reason, error);
}

void Scheduler::postprocess(StepBatch& batch, std::span<const SequenceResult> results) {
  size_t at = 0;
  for (Sequence* s : batch.sequences) {
    const size_t n = s->forwards().size();
    s->publish_prefix();
    const bool done = s->observe(results.subspan(at, n));
    at += n;
    if (done) retire(*s, s->result().finish_reason, s->result().error);
  }
}

void Scheduler::fail_batch(StepBatch& batch, const std::string& error) {
  for (Sequence* s : batch.sequences) retire(*s, "error", error);
}

}  // namespace dllm
