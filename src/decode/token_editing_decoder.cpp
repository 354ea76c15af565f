#include "decode/token_editing_decoder.h"

#include <algorithm>

#include "decode/block_schedule.h"
#include "decode/sparse_recall_metrics.h"
#include "decode/token_editing_rule.h"

namespace dllm {

TokenEditingDecoder::TokenEditingDecoder(const ModelConfig& config, const DecodeParams& params,
                                         const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      sparse_(params.sparse, 0) {  // no step count: SparseD is refused for this strategy
  const int32_t b = params_.block_length;
  x_ = aligned_block_canvas(prompt, params_.max_tokens, b, mask_id_);
  num_blocks_ = static_cast<int32_t>(x_.size()) / b;
  block_ = prompt_len_ / b;  // the prompt's last partial block is decoded with the first tokens
  phase_ = block_ > 0 ? Phase::kPrefill : Phase::kDenoise;
}

bool TokenEditingDecoder::block_has_mask() const {
  return aligned_block_has_mask(x_, block_, params_.block_length, mask_id_);
}

bool TokenEditingDecoder::plan(SequenceForward& fwd) {
  const int32_t b = params_.block_length, s = block_start();
  fwd.rule = AttentionRule::block_causal(b);
  if (phase_ == Phase::kDone) return false;
  ++forwards_;
  if (phase_ == Phase::kPrefill || phase_ == Phase::kCommit) {
    // Prefill: the prompt's whole blocks; commit: the finished block. Both append their K/V.
    const int32_t begin = phase_ == Phase::kPrefill ? 0 : s;
    const int32_t end = phase_ == Phase::kPrefill ? s : s + b;
    fwd.tokens.assign(x_.begin() + begin, x_.begin() + end);
    for (int32_t i = begin; i < end; ++i) fwd.positions.push_back(i);
    fwd.write = CacheWrite::kAppend;
    ++rng_steps_;
    if (phase_ == Phase::kCommit) sparse_.plan(fwd, block_, /*denoise=*/false);
    return true;
  }
  had_mask_ = block_has_mask();
  if (!had_mask_) {
    ++post_steps_;
    ++post_forwards_;
  }
  fwd.tokens.assign(x_.begin() + s, x_.begin() + s + b);
  for (int32_t i = 0; i < b; ++i) fwd.positions.push_back(s + i);
  fwd.write = CacheWrite::kNone;
  rows_.clear();
  for (int32_t i = std::max(0, prompt_len_ - s); i < b; ++i) {  // prompt rows are never edited
    rows_.push_back(i);
    fwd.output_rows.push_back(i);
  }
  fwd.want_stats = true;
  fwd.sampler = params_.sampler;
  fwd.rng = RngKey{params_.seed, params_.sequence_id, rng_steps_++};
  sparse_.plan(fwd, block_, /*denoise=*/true);
  return true;
}

void TokenEditingDecoder::observe(const SequenceResult& result) {
  sparse_.observe(result);
  switch (phase_) {
    case Phase::kPrefill:
      phase_ = Phase::kDenoise;
      return;
    case Phase::kCommit:
      ++block_;
      post_steps_ = 0;
      phase_ = block_ < num_blocks_ ? Phase::kDenoise : Phase::kDone;
      return;
    case Phase::kDenoise:
      observe_denoise(result);
      return;
    case Phase::kDone:
      return;
  }
}

void TokenEditingDecoder::observe_denoise(const SequenceResult& result) {
  const int32_t s = block_start();
  // Both rules read the rows as they were when the forward was planned.
  std::vector<int32_t> current;
  for (int32_t i : rows_) current.push_back(x_[static_cast<size_t>(s + i)]);
  const auto fill = mask_fills(current, result.stats, mask_id_, params_.threshold);
  const auto edit = token_edits(current, result.stats, mask_id_, params_.editing_threshold);
  for (size_t r : fill) x_[static_cast<size_t>(s + rows_[r])] = result.stats[r].token;
  for (size_t r : edit) x_[static_cast<size_t>(s + rows_[r])] = result.stats[r].token;
  edits_ += static_cast<int64_t>(edit.size());

  // The block ends when a forward without masks edited nothing, or when the next forward would
  // exceed the post-mask budget (the reference checks that before forwarding).
  const bool masks_left = block_has_mask();
  const bool finished =
      (!had_mask_ && edit.empty()) || (!masks_left && post_steps_ + 1 > params_.max_post_steps);
  if (!finished) return;
  const size_t end = static_cast<size_t>(s + params_.block_length);
  for (size_t i = static_cast<size_t>(prompt_len_) + final_.size(); i < end; ++i)
    final_.push_back(x_[i]);
  phase_ = Phase::kCommit;
}

std::vector<int32_t> TokenEditingDecoder::canvas() const {
  const int32_t end =
      std::min<int32_t>(static_cast<int32_t>(x_.size()), (block_ + 1) * params_.block_length);
  return {x_.begin() + prompt_len_, x_.begin() + std::max(prompt_len_, end)};
}

std::vector<DecoderMetric> TokenEditingDecoder::metrics(int64_t) const {
  std::vector<DecoderMetric> m = {
      {"edits", static_cast<double>(edits_), true},
      {"post_edit_forwards", static_cast<double>(post_forwards_), true}};
  append_recall_metrics(sparse_, m);
  return m;
}

}  // namespace dllm
