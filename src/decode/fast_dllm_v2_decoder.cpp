#include "decode/fast_dllm_v2_decoder.h"

#include <algorithm>

#include "decode/sparse_recall_metrics.h"

namespace dllm {

FastDllmV2Decoder::FastDllmV2Decoder(const ModelConfig& config, const DecodeParams& params,
                                     const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      x_(prompt),
      // SparseD's nominal steps: one per token of every block to decode.
      sparse_(params.sparse, static_cast<int64_t>(params.block_length) *
                                 ((prompt_len_ + params.max_tokens + params.block_length - 1) /
                                      params.block_length -
                                  prompt_len_ / params.block_length)) {
  const int32_t b = params_.block_length;
  if (prompt_len_ >= b) {
    phase_ = Phase::kPrefill;
  } else {
    open_block();
  }
}

int64_t FastDllmV2Decoder::cache_capacity() const {
  return prompt_len_ + params_.max_tokens + 2 * params_.block_length;
}

void FastDllmV2Decoder::open_block() {
  const int32_t b = params_.block_length;
  const int32_t fill = b - static_cast<int32_t>(x_.size()) % b;
  x_.insert(x_.end(), static_cast<size_t>(fill), mask_id_);
  phase_ = Phase::kDenoise;
}

bool FastDllmV2Decoder::plan(SequenceForward& fwd) {
  const int32_t b = params_.block_length;
  fwd.rule = AttentionRule::block_causal(b);
  fwd.want_stats = true;
  fwd.sampler = params_.sampler;
  fwd.rng = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
  if (phase_ == Phase::kPrefill) {
    const int32_t n = (prompt_len_ / b) * b;
    fwd.tokens.assign(x_.begin(), x_.begin() + n);
    for (int32_t i = 0; i < n; ++i) fwd.positions.push_back(i);
    fwd.write = CacheWrite::kAppend;
    fwd.output_rows = {n - 1};  // predicts position n when the prompt ends on a block boundary
    ++forwards_;
    return true;
  }
  const int32_t s = block_start();
  fwd.tokens.assign(x_.begin() + s, x_.begin() + s + b);
  for (int32_t i = 0; i < b; ++i) fwd.positions.push_back(s + i);
  if (std::find(fwd.tokens.begin(), fwd.tokens.end(), mask_id_) == fwd.tokens.end()) {
    phase_ = Phase::kCommit;
    fwd.write = CacheWrite::kAppend;
    fwd.output_rows = {b - 1};  // the next block's first token
    sparse_.plan(fwd, s / b, /*denoise=*/false);
    ++forwards_;
    return true;
  }
  // The first sub-block that still has masks; token j is predicted by the logit at j - 1.
  const int32_t sb = params_.sub_block_length;
  int32_t first_mask = 0;
  while (x_[static_cast<size_t>(s + first_mask)] != mask_id_) ++first_mask;
  const int32_t sub_start = (first_mask / sb) * sb;
  pending_.clear();
  fwd.write = CacheWrite::kNone;
  for (int32_t j = sub_start; j < sub_start + sb; ++j) {
    if (x_[static_cast<size_t>(s + j)] != mask_id_) continue;
    pending_.push_back(j);
    fwd.output_rows.push_back(std::max(j - 1, 0));
    fwd.rng_positions.push_back(s + j);
  }
  sparse_.plan(fwd, s / b, /*denoise=*/true);
  ++forwards_;
  return true;
}

void FastDllmV2Decoder::observe(const SequenceResult& result) {
  sparse_.observe(result);
  const int32_t b = params_.block_length;
  if (phase_ == Phase::kPrefill || phase_ == Phase::kCommit) {
    cached_ = phase_ == Phase::kPrefill ? (prompt_len_ / b) * b : cached_ + b;
    // The reference takes the argmax here whatever the temperature.
    if (phase_ == Phase::kCommit || prompt_len_ % b == 0) x_.push_back(result.stats[0].argmax);
    open_block();
    update_final();
    return;
  }
  const int32_t s = block_start();
  // Greedy: confidence is softmax(logits)[argmax]; sampling: the top-p renormalised probability.
  const bool greedy = params_.sampler.greedy();
  int32_t best = -1;
  float best_conf = -1.0f;
  for (size_t r = 0; r < pending_.size(); ++r) {
    const TokenStats& st = result.stats[r];
    const float conf = greedy ? st.p_token_tempered : st.p_token;
    if (conf > best_conf) {
      best_conf = conf;
      best = static_cast<int32_t>(r);
    }
    if (conf > params_.threshold) x_[static_cast<size_t>(s + pending_[r])] = st.token;
  }
  x_[static_cast<size_t>(s + pending_[static_cast<size_t>(best)])] =
      result.stats[static_cast<size_t>(best)].token;
  update_final();
}

void FastDllmV2Decoder::update_final() {
  size_t i = static_cast<size_t>(prompt_len_) + final_.size();
  while (i < x_.size() && x_[i] != mask_id_) final_.push_back(x_[i++]);
}

std::vector<int32_t> FastDllmV2Decoder::canvas() const {
  return {x_.begin() + prompt_len_, x_.end()};
}

std::vector<DecoderMetric> FastDllmV2Decoder::metrics(int64_t) const {
  std::vector<DecoderMetric> m;
  append_recall_metrics(sparse_, m);
  return m;
}

}  // namespace dllm
