#include "decode/block_diffusion_decoder.h"

#include <algorithm>

#include "core/error.h"
#include "decode/block_schedule.h"
#include "decode/sparse_recall_metrics.h"

namespace dllm {

BlockDiffusionDecoder::BlockDiffusionDecoder(const ModelConfig& config, const DecodeParams& params,
                                             const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      sparse_(params.sparse, static_cast<int64_t>(params.steps) *
                                 ((prompt_len_ + params.max_tokens + params.block_length - 1) /
                                      params.block_length -
                                  prompt_len_ / params.block_length)) {
  const int32_t b = params_.block_length;
  x_ = aligned_block_canvas(prompt, params_.max_tokens, b, mask_id_);
  num_blocks_ = static_cast<int32_t>(x_.size()) / b;
  schedule_ = transfer_schedule(b, params_.steps);
  block_ = prompt_len_ / b;
  phase_ = block_ > 0 ? Phase::kPrefill : Phase::kDenoise;
}

bool BlockDiffusionDecoder::block_has_mask() const {
  return aligned_block_has_mask(x_, block_, params_.block_length, mask_id_);
}

bool BlockDiffusionDecoder::plan(SequenceForward& fwd) {
  const int32_t b = params_.block_length;
  fwd.rule = AttentionRule::block_causal(b);
  fused_ = false;
  if (phase_ == Phase::kDone) return false;
  ++forwards_;
  if (phase_ == Phase::kPrefill) {
    const int32_t n = block_ * b;
    fwd.tokens.assign(x_.begin(), x_.begin() + n);
    for (int32_t i = 0; i < n; ++i) fwd.positions.push_back(i);
    fwd.write = CacheWrite::kAppend;
    ++rng_steps_;
    return true;
  }
  if (phase_ == Phase::kDenoise && !block_has_mask()) phase_ = Phase::kCommit;
  const int32_t s = block_start();
  if (phase_ == Phase::kDenoise) {
    plan_denoise(fwd, 0, rng_steps_++);
    sparse_.plan(fwd, block_, /*denoise=*/true);
    return true;
  }
  // Commit: the finished block's rows are appended to the cache.
  fwd.tokens.assign(x_.begin() + s, x_.begin() + s + b);
  for (int32_t i = 0; i < b; ++i) fwd.positions.push_back(s + i);
  fwd.write = CacheWrite::kAppend;
  ++rng_steps_;
  if (!params_.fuse_commit) sparse_.plan(fwd, block_, /*denoise=*/false);
  if (params_.fuse_commit && block_ + 1 < num_blocks_) {
    fused_ = true;
    fwd.append_count = b;
    ++block_;  // the next block's rows follow as scratch; undone in observe()
    plan_denoise(fwd, b, rng_steps_++);
    --block_;
  }
  return true;
}

void BlockDiffusionDecoder::plan_denoise(SequenceForward& fwd, int32_t offset, uint32_t rng_step) {
  const int32_t b = params_.block_length, s = block_start();
  fwd.tokens.insert(fwd.tokens.end(), x_.begin() + s, x_.begin() + s + b);
  for (int32_t i = 0; i < b; ++i) fwd.positions.push_back(s + i);
  if (offset == 0) fwd.write = CacheWrite::kNone;
  pending_rows_.clear();
  for (int32_t i = 0; i < b; ++i)
    if (x_[static_cast<size_t>(s + i)] == mask_id_) {
      pending_rows_.push_back(i);
      fwd.output_rows.push_back(offset + i);
    }
  fwd.want_stats = true;
  fwd.sampler = params_.sampler;
  fwd.rng = RngKey{params_.seed, params_.sequence_id, rng_step};
}

void BlockDiffusionDecoder::observe(const SequenceResult& result) {
  sparse_.observe(result);
  switch (phase_) {
    case Phase::kPrefill:
      phase_ = Phase::kDenoise;
      return;
    case Phase::kCommit:
      ++block_;
      step_ = 0;
      phase_ = block_ < num_blocks_ ? Phase::kDenoise : Phase::kDone;
      if (fused_) observe_denoise(result);  // the next block's first step came with it
      return;
    case Phase::kDone:
      return;
    case Phase::kDenoise:
      observe_denoise(result);
      return;
  }
}

void BlockDiffusionDecoder::observe_denoise(const SequenceResult& result) {
  const int32_t b = params_.block_length, s = block_start();
  std::vector<float> confidence(static_cast<size_t>(b), 0.0f);
  std::vector<int32_t> sampled(static_cast<size_t>(b), mask_id_);
  std::vector<bool> masked(static_cast<size_t>(b), false);
  for (size_t r = 0; r < pending_rows_.size(); ++r) {
    const TokenStats& st = result.stats[r];
    const size_t i = static_cast<size_t>(pending_rows_[r]);
    masked[i] = true;
    sampled[i] = st.token;
    confidence[i] = tempered_confidence(params_) ? st.p_token_tempered : st.p_token;
  }
  const int32_t k = schedule_[static_cast<size_t>(std::min<int32_t>(step_, params_.steps - 1))];
  for (int32_t i : select_unmask(params_.remasking, confidence, masked, k, params_.threshold))
    x_[static_cast<size_t>(s + i)] = sampled[static_cast<size_t>(i)];
  ++step_;
  update_final();
}

void BlockDiffusionDecoder::update_final() {
  size_t i = static_cast<size_t>(prompt_len_) + final_.size();
  while (i < x_.size() && x_[i] != mask_id_) final_.push_back(x_[i++]);
}

std::vector<int32_t> BlockDiffusionDecoder::canvas() const {
  const int32_t end =
      std::min<int32_t>(static_cast<int32_t>(x_.size()), (block_ + 1) * params_.block_length);
  return {x_.begin() + prompt_len_, x_.begin() + std::max(prompt_len_, end)};
}

std::vector<DecoderMetric> BlockDiffusionDecoder::metrics(int64_t) const {
  std::vector<DecoderMetric> m;
  append_recall_metrics(sparse_, m);
  return m;
}

}  // namespace dllm
