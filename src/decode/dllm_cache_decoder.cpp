#include "decode/dllm_cache_decoder.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "decode/full_diffusion_schedule.h"

namespace dllm {

DllmCacheDecoder::DllmCacheDecoder(const ModelConfig& config, const DecodeParams& params,
                                   const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      shift_(config.family == "dream" ? 1 : 0),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      block_len_(params.block_length),
      blocks_(params.max_tokens / params.block_length),
      steps_per_block_(params.steps / (params.max_tokens / params.block_length)),
      total_(static_cast<int64_t>(prompt.size()) + params.max_tokens) {
  x_ = prompt;
  x_.resize(static_cast<size_t>(total_), mask_id_);
}

bool DllmCacheDecoder::block_has_masks() const {
  return range_has_mask(x_, prompt_len_ + block_ * block_len_, block_len_, mask_id_);
}

bool DllmCacheDecoder::plan(SequenceForward& fwd) {
  while (block_ < blocks_ && (step_in_block_ >= steps_per_block_ || !block_has_masks())) {
    ++block_;
    step_in_block_ = 0;
  }
  if (block_ >= blocks_) return false;
  fwd.tokens = x_;
  fwd.positions.resize(x_.size());
  std::iota(fwd.positions.begin(), fwd.positions.end(), 0);
  fwd.rule = AttentionRule::bidirectional();
  fwd.write = CacheWrite::kNone;
  const auto t = static_cast<int32_t>(forwards_);
  fwd.dllm_cache =
      DllmCacheStep{prompt_len_, t % params_.dlc_kp == 0, t % params_.dlc_kr == 0, params_.dlc_rho};
  pending_.clear();
  const int32_t s = prompt_len_ + block_ * block_len_;
  for (int32_t j = s; j < s + block_len_; ++j) {
    if (x_[static_cast<size_t>(j)] != mask_id_) continue;
    pending_.push_back(j);
    fwd.output_rows.push_back(j - shift_);  // Dream: token j from the logit at j - 1
    fwd.rng_positions.push_back(j);
  }
  fwd.want_stats = true;
  fwd.sampler = params_.sampler;
  fwd.rng = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
  ++forwards_;
  return true;
}

void DllmCacheDecoder::observe(const SequenceResult& result) {
  if (result.stats.size() != pending_.size())
    fail("dllmcache: expected ", pending_.size(), " token stats");
  const int32_t count = [&] {
    const int32_t base = block_len_ / steps_per_block_, rem = block_len_ % steps_per_block_;
    return base + (step_in_block_ < rem ? 1 : 0);
  }();
  std::vector<size_t> chosen;
  if (params_.threshold >= 0)
    for (size_t i = 0; i < pending_.size(); ++i)
      if (result.stats[i].p_token >= params_.threshold) chosen.push_back(i);
  if (static_cast<int32_t>(chosen.size()) < count) {
    std::vector<size_t> order(pending_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return result.stats[a].p_token > result.stats[b].p_token;
    });
    order.resize(std::min(order.size(), static_cast<size_t>(count)));
    chosen = order;
  }
  for (size_t i : chosen) x_[static_cast<size_t>(pending_[i])] = result.stats[i].token;
  ++step_in_block_;
  size_t i = static_cast<size_t>(prompt_len_) + final_.size();
  while (i < x_.size() && x_[i] != mask_id_) final_.push_back(x_[i++]);
}

std::vector<int32_t> DllmCacheDecoder::canvas() const {
  return {x_.begin() + prompt_len_, x_.end()};
}

}  // namespace dllm
