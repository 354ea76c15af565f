#include "decode/wedlm_decoder.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace dllm {

WedlmDecoder::WedlmDecoder(const ModelConfig& config, const DecodeParams& params,
                           const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      window_size_(params.window.value_or(0)),
      threshold_(params.entropy_threshold.value_or(0.0f)),
      penalty_(params.pos_penalty.value_or(0.0f)),
      prompt_(prompt) {
  if (window_size_ <= 0 || !params.entropy_threshold || !params.pos_penalty)
    fail("WeDLM decoder: unresolved parameters (call resolve_decode_params first)");
}

int32_t WedlmDecoder::leading_filled() const {
  int32_t n = 0;
  while (n < static_cast<int32_t>(window_.size()) && window_[static_cast<size_t>(n)] != mask_id_)
    ++n;
  return n;
}

bool WedlmDecoder::plan(SequenceForward& fwd) {
  fwd.rule = AttentionRule::causal();
  fwd.write = CacheWrite::kAppend;
  if (!prefilled_) {
    fwd.tokens = prompt_;
    for (size_t i = 0; i < prompt_.size(); ++i) fwd.positions.push_back(static_cast<int32_t>(i));
    ++forwards_;
    return true;
  }
  if (static_cast<int64_t>(final_.size()) >= params_.max_tokens) return false;

  // (a) refill: as many masks as slots will be committed after this forward.
  pending_commit_ = leading_filled();
  window_.insert(window_.end(), static_cast<size_t>(pending_commit_), mask_id_);

  // (b) reorder: filled slots first, then masks, both in window order (logical positions kept).
  const int32_t base = static_cast<int32_t>(prompt_.size() + final_.size());
  const int32_t n = static_cast<int32_t>(window_.size());
  mask_rows_.clear();
  for (int32_t pass = 0; pass < 2; ++pass)
    for (int32_t i = 0; i < n; ++i) {
      const bool is_mask = window_[static_cast<size_t>(i)] == mask_id_;
      if (is_mask != (pass == 1)) continue;
      if (is_mask) mask_rows_.push_back(static_cast<int32_t>(fwd.tokens.size()));
      fwd.tokens.push_back(window_[static_cast<size_t>(i)]);
      fwd.positions.push_back(base + i);
    }
  // (c) the leading run sits physically first at its own positions: commit exactly it.
  fwd.append_count = pending_commit_;
  if (params_.pad_window) {
    for (int32_t pos = base + n; static_cast<int32_t>(fwd.tokens.size()) < 2 * window_size_;
         ++pos) {
      fwd.tokens.push_back(mask_id_);
      fwd.positions.push_back(pos);
    }
    // Every row is an output row, so the forward's shape (queries and output rows) is the same
    // at every step and one captured CUDA graph serves them all; observe() reads the mask rows.
    for (int32_t r = 0; r < 2 * window_size_; ++r) fwd.output_rows.push_back(r);
  } else {
    fwd.output_rows = mask_rows_;
  }
  fwd.want_stats = true;
  fwd.sampler = params_.sampler;
  // rng_positions default to the output rows' logical positions: each mask's draw is keyed by
  // the position it decides.
  fwd.rng = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
  window_tokens_ += n;
  ++decode_forwards_;
  ++forwards_;
  return true;
}

void WedlmDecoder::observe(const SequenceResult& result) {
  if (!prefilled_) {
    prefilled_ = true;
    window_.assign(static_cast<size_t>(window_size_), mask_id_);
    return;
  }
  // (d) commit the leading run, whose K/V this forward wrote at its final slots.
  const auto run_end = window_.begin() + pending_commit_;
  final_.insert(final_.end(), window_.begin(), run_end);
  window_.erase(window_.begin(), run_end);

  // (e) fill: the stats rows are the masks in window order.
  std::vector<int32_t> masks;
  for (int32_t i = 0; i < static_cast<int32_t>(window_.size()); ++i)
    if (window_[static_cast<size_t>(i)] == mask_id_) masks.push_back(i);
  if (masks.size() != mask_rows_.size())
    fail("WeDLM decoder: ", mask_rows_.size(), " mask rows planned for ", masks.size(), " masks");
  // Stats of the k-th mask: its row among the output rows (all rows when padded).
  const auto stats_of = [&](size_t k) -> const TokenStats& {
    const size_t row = params_.pad_window ? static_cast<size_t>(mask_rows_[k]) : k;
    if (row >= result.stats.size())
      fail("WeDLM decoder: ", result.stats.size(), " stats rows, mask row ", row, " wanted");
    return result.stats[row];
  };
  if (masks.empty()) return;
  std::vector<size_t> fill;
  size_t best = 0;
  double best_score = std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < masks.size(); ++k) {
    const double score = static_cast<double>(stats_of(k).entropy) +
                         penalty_ * static_cast<double>(masks[k] - masks[0]);
    if (score < best_score) best_score = score, best = k;  // the first minimum, as argmin
    if (score < threshold_) fill.push_back(k);
  }
  if (fill.empty()) fill.push_back(best);
  for (size_t k : fill) window_[static_cast<size_t>(masks[k])] = stats_of(k).token;
}

std::vector<int32_t> WedlmDecoder::canvas() const {
  std::vector<int32_t> c = final_;
  c.insert(c.end(), window_.begin(), window_.end());
  return c;
}

std::vector<DecoderMetric> WedlmDecoder::metrics(int64_t generated_tokens) const {
  const double p_cache =
      window_tokens_ > 0 ? static_cast<double>(generated_tokens) / double(window_tokens_) : 0.0;
  return {{"p_cache", p_cache, false},
          {"decode_forwards", static_cast<double>(decode_forwards_), true},
          {"window_tokens", static_cast<double>(window_tokens_), true}};
}

}  // namespace dllm
