#include "engine/sequence.h"

#include <algorithm>
#include <cmath>

#include "backend/sequence_slots.h"
#include "core/error.h"
#include "engine/prefix_sharing.h"

namespace dllm {

namespace {
double seconds_since(Sequence::Clock::time_point t) {
  return std::chrono::duration<double>(Sequence::Clock::now() - t).count();
}
int64_t needed_capacity(std::span<const int32_t> query_slots) {
  int64_t n = 0;
  for (int32_t s : query_slots) n = std::max<int64_t>(n, s + 1);
  return n;
}
}  // namespace

Sequence::Sequence(SequenceRequest request, uint64_t arrival_order)
    : request_(std::move(request)), arrival_order_(arrival_order) {
  result_.finish_reason = "length";
}

void Sequence::start(const ModelConfig& config, Backend& backend) {
  config_ = &config;
  decoder_ = make_decoder(config, request_.params, request_.prompt);
  cache_ = std::make_unique<KvCache>(backend.kv_pool());
  state_ = backend.create_method_state();
  if (!admitted_once_) result_.stats.queue_seconds = seconds_since(arrival_);
  admitted_once_ = true;
}

void Sequence::reset(bool preempted) {
  if (decoder_ && preempted) forwards_before_ += decoder_->forwards();
  forwards_.clear();
  scratch_.clear();
  decoder_.reset();
  state_.reset();
  cache_.reset();
  prefill_tokens_.clear();
  prefix_cached_tokens = 0;
  if (preempted) ++result_.stats.preemptions;
}

int64_t Sequence::planned_rows() const {
  int64_t n = 0;
  for (const SequenceForward& f : forwards_) n += static_cast<int64_t>(f.tokens.size());
  return n;
}

void Sequence::share_prefix() {
  if (forwards_.size() != 1) return;
  SequenceForward& f = forwards_[0];
  if (f.cache != cache_.get() || !is_shareable_prefill(f, *f.cache, request_.prompt)) return;
  // Pages are keyed by token ids; a vision prompt's placeholders stand for features the ids do
  // not identify, so its prefill is neither published nor adopted.
  if (request_.input_embeddings) return;
  prefill_tokens_.assign(f.tokens.begin(), f.tokens.begin() + committed_rows(f));
  prefill_rule_ = f.rule;
  prefix_cached_tokens = adopt_shared_prefix(f, *f.cache);
}

void Sequence::publish_prefix() {
  if (prefill_tokens_.empty() || !cache_) return;
  dllm::publish_prefix(prefill_tokens_, prefill_rule_, *cache_);
  prefill_tokens_.clear();
}

bool Sequence::plan(Backend& backend) {
  forwards_.clear();
  scratch_.clear();
  forwards_.resize(1);
  forwards_[0].cache = decoder_->cache_capacity() > 0 ? cache_.get() : nullptr;
  forwards_[0].state = state_.get();
  if (!decoder_->plan_step(forwards_)) {
    forwards_.clear();
    return false;
  }
  for (SequenceForward& f : forwards_) {
    f.input_embeddings = request_.input_embeddings;
    if (f.rule.kind == AttentionKind::kCausal || f.rule.kind == AttentionKind::kBlockCausal)
      f.sparse_prefill = request_.sparse_prefill;
    f.want_routing = request_.trace_routing && !f.dllm_cache;
  }
  // A forward planned without a cache sees only its own queries: an empty scratch cache says
  // the same, and gives its fresh K/V pool pages for the length of the step.
  for (SequenceForward& f : forwards_)
    if (!f.cache) {
      scratch_.push_back(std::make_unique<KvCache>(backend.kv_pool()));
      f.cache = scratch_.back().get();
    }
  for (size_t i = 0; i < forwards_.size(); ++i)
    if (!forwards_[i].tokens.empty()) backend.check_forward(forwards_[i], i);
  return true;
}

int64_t Sequence::pages_needed() const {
  int64_t pages = 0;
  for (size_t i = 0; i < forwards_.size(); ++i) {
    const SequenceForward& f = forwards_[i];
    if (f.tokens.empty()) continue;  // a prefill the prefix cache answered whole
    validate_forward(*config_, f, i);
    if (f.dllm_cache) {
      pages += f.cache->pages_for(static_cast<int64_t>(f.tokens.size()));
      continue;
    }
    const std::vector<int32_t> slots = query_slots_of(f, f.cache);
    pages += f.cache->pages_for(needed_capacity(slots)) + f.cache->copy_pages_for(slots);
  }
  return pages;
}

void Sequence::reserve_pages() {
  for (SequenceForward& f : forwards_)
    if (!f.tokens.empty())
      f.cache->reserve(f.dllm_cache ? static_cast<int64_t>(f.tokens.size())
                                    : needed_capacity(query_slots_of(f, f.cache)));
}

bool Sequence::observe(std::span<const SequenceResult> results) {
  for (const SequenceForward& f : forwards_)
    result_.stats.query_rows += static_cast<int64_t>(f.tokens.size());
  if (const auto bad = non_finite_output(results)) return stop_with_error(*bad);
  decoder_->observe_step(results);
  if (decoder_->forwards() > forward_cap())
    return stop_with_error(cat("the request made ", decoder_->forwards(),
                               " forwards without finishing (at most 4 x (prompt + max_tokens) + ",
                               "64 = ", forward_cap(), "): its decoder makes no progress"));
  forwards_.clear();
  scratch_.clear();
  const SequenceCallbacks& cb = request_.callbacks;
  if (cb.on_trace) cb.on_trace(*decoder_, results);

  // Stop ids, stop rule and max_tokens over the final tokens; stream what survives.
  const auto& fin = decoder_->final_tokens();
  const auto& stop_ids = request_.stop_ids;
  const size_t max_tokens = static_cast<size_t>(request_.params.max_tokens);
  bool done = false;
  size_t keep = fin.size();
  for (size_t i = emitted_; i < fin.size(); ++i)
    if (std::find(stop_ids.begin(), stop_ids.end(), fin[i]) != stop_ids.end()) {
      keep = i;
      result_.finish_reason = "stop";
      done = true;
      break;
    }
  if (keep >= max_tokens) {  // a stop token past max_tokens does not count
    result_.finish_reason = "length";
    keep = max_tokens;
    done = true;
  }
  if (cb.stop_rule) {
    const int64_t cut = cb.stop_rule(std::span(fin.data(), keep));
    if (cut >= 0) {
      keep = std::min(keep, static_cast<size_t>(cut));
      result_.finish_reason = "stop";
      done = true;
    }
  }
  if (keep > emitted_) {
    if (result_.stats.first_token_seconds < 0)
      result_.stats.first_token_seconds = seconds_since(arrival_);
    if (cb.on_tokens) cb.on_tokens(std::span(fin.data() + emitted_, keep - emitted_));
    result_.ids.insert(result_.ids.end(), fin.begin() + static_cast<std::ptrdiff_t>(emitted_),
                       fin.begin() + static_cast<std::ptrdiff_t>(keep));
    emitted_ = keep;
  }
  return done;
}

std::optional<std::string> Sequence::non_finite_output(
    std::span<const SequenceResult> results) const {
  for (const SequenceResult& r : results) {
    const bool stats_ok = std::all_of(r.stats.begin(), r.stats.end(), [](const TokenStats& t) {
      return std::isfinite(t.p_max) && std::isfinite(t.entropy) && std::isfinite(t.p_token);
    });
    const bool logits_ok =
        std::all_of(r.logits.begin(), r.logits.end(), [](float x) { return !std::isnan(x); });
    if (!stats_ok || !logits_ok)
      return std::string(
          "the model produced non-finite logits (NaN or infinity): the checkpoint's weights or "
          "the activations are broken, and no decoder can choose a token from them");
  }
  return std::nullopt;
}

int64_t Sequence::forward_cap() const {
  return 4 * (static_cast<int64_t>(request_.prompt.size()) + request_.params.max_tokens) + 64;
}

bool Sequence::stop_with_error(const std::string& error) {
  result_.finish_reason = "error";
  result_.error = error;
  return true;
}

void Sequence::finish(const std::string& reason, const std::string& error) {
  GenerationStats& s = result_.stats;
  result_.finish_reason = reason;
  result_.error = error;
  s.prompt_tokens = static_cast<int64_t>(request_.prompt.size());
  s.generated_tokens = static_cast<int64_t>(result_.ids.size());
  s.forwards = forwards_before_ + (decoder_ ? decoder_->forwards() : 0);
  s.prefix_cached_tokens = prefix_cached_tokens;
  if (decoder_) {
    s.decoder_metrics = decoder_->metrics(s.generated_tokens);
    if (const SpeculationStats* spec = decoder_->speculation()) {
      s.speculative = true;
      s.speculation = *spec;
    }
  }
  s.seconds = seconds_since(arrival_);
  forwards_.clear();
  scratch_.clear();
  decoder_.reset();
  state_.reset();
  cache_.reset();
  status = SequenceStatus::kFinished;
  if (request_.callbacks.on_finish) request_.callbacks.on_finish(std::move(result_));
}

}  // namespace dllm
