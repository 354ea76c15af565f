#include "engine/engine_core.h"

#include <optional>

#include "core/error.h"

namespace dllm {

namespace {
double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

EngineCore::EngineCore(const Model& model, Backend& backend, const SchedulerConfig& config)
    : model_(model),
      backend_(backend),
      pool_(backend.kv_pool()),
      scheduler_(config, model.config(), backend),
      step_log_(StepLog::from_environment()) {}

void EngineCore::add(SequenceRequest request) {
  // Count what every request streams and how it ends.
  SequenceCallbacks& cb = request.callbacks;
  cb.on_tokens = [this, inner = std::move(cb.on_tokens)](std::span<const int32_t> ids) {
    counters_.committed_tokens += static_cast<int64_t>(ids.size());
    if (inner) inner(ids);
  };
  cb.on_finish = [this, inner = std::move(cb.on_finish)](GenerationResult&& r) {
    if (r.finish_reason == "cancelled") {
      ++counters_.cancelled;
    } else if (r.finish_reason == "error") {
      ++counters_.errors;
    } else {
      ++counters_.finished;
    }
    if (inner) inner(std::move(r));
  };
  scheduler_.add(std::make_unique<Sequence>(std::move(request), arrivals_++));
}

bool EngineCore::cancel(uint64_t id) {
  return scheduler_.cancel(id);
}

std::vector<SequenceResult> EngineCore::run(StepBatch& batch) {
  std::vector<SequenceForward> flat;
  std::vector<size_t> nonempty;  // indices into flat of forwards with rows
  for (Sequence* s : batch.sequences)
    for (SequenceForward& f : s->forwards()) {
      if (!f.tokens.empty()) nonempty.push_back(flat.size());
      flat.push_back(std::move(f));
    }
  std::vector<SequenceForward> to_run;
  to_run.reserve(nonempty.size());
  for (size_t i : nonempty) to_run.push_back(std::move(flat[i]));
  for (const SequenceForward& f : to_run) counters_.rows += static_cast<int64_t>(f.tokens.size());
  std::vector<SequenceResult> ran;
  std::optional<Error> failure;
  try {
    if (!to_run.empty()) ran = backend_.forward(to_run);
  } catch (const std::exception& e) {  // a device failure: the batch's requests end with it
    failure = Error(e.what());
  }
  // Give the forwards back to their sequences (decoders read them in observe()).
  for (size_t k = 0; k < nonempty.size(); ++k) flat[nonempty[k]] = std::move(to_run[k]);
  size_t at = 0;
  for (Sequence* s : batch.sequences)
    for (SequenceForward& f : s->forwards()) f = std::move(flat[at++]);
  if (failure) throw *failure;
  std::vector<SequenceResult> results(flat.size());
  for (size_t k = 0; k < nonempty.size(); ++k) results[nonempty[k]] = std::move(ran[k]);
  return results;
}

bool EngineCore::step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepBatch batch = scheduler_.schedule();
  counters_.preemptions = scheduler_.preemptions();
  if (batch.sequences.empty()) return false;
  const auto t1 = std::chrono::steady_clock::now();
  const int64_t rows_before = counters_.rows, committed_before = counters_.committed_tokens;
  std::vector<SequenceResult> results;
  try {
    results = run(batch);
  } catch (const Error& e) {
    scheduler_.fail_batch(batch, e.what());
    return true;
  }
  const auto t2 = std::chrono::steady_clock::now();
  ++counters_.steps;
  counters_.sequences_in_steps += static_cast<int64_t>(batch.sequences.size());
  scheduler_.postprocess(batch, results);
  const auto t3 = std::chrono::steady_clock::now();
  counters_.forward_seconds += seconds_between(t1, t2);
  counters_.schedule_seconds += seconds_between(t0, t1) + seconds_between(t2, t3);
  if (step_log_)
    step_log_->write({t0, 1e3 * seconds_between(t0, t1), 1e3 * seconds_between(t1, t2),
                      1e3 * seconds_between(t2, t3), static_cast<int64_t>(batch.sequences.size()),
                      counters_.rows - rows_before, counters_.committed_tokens - committed_before,
                      static_cast<int64_t>(scheduler_.waiting()),
                      static_cast<int64_t>(scheduler_.running())});
  return true;
}

GenerationResult EngineCore::generate(const GenerationRequest& request,
                                      const TokenCallback& on_tokens, const TraceCallback& trace,
                                      const StopRule& stop_rule) {
  SequenceRequest r;
  r.id = next_internal_id_++;
  r.prompt = request.prompt;
  r.params = request.params;
  r.stop_ids = request.stop_ids;
  std::optional<GenerationResult> out;
  r.callbacks = {on_tokens, trace, stop_rule, [&](GenerationResult&& g) { out = std::move(g); }};
  r.trace_routing = static_cast<bool>(trace);  // a traced run is a test's: it compares routing
  add(std::move(r));
  while (!out)
    if (!step() && !out) fail("the engine could not schedule the request (KV pool too small?)");
  if (out->finish_reason == "error") throw Error(out->error);
  return std::move(*out);
}

}  // namespace dllm
