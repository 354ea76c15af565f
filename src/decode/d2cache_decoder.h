// d²Cache (method-specs §4, papers/d2cache.txt) for the full-diffusion families LLaDA and Dream:
// the whole canvas (prompt + max_tokens masks) lives in the KV cache. Step 0 forwards every
// row and fills the cache; every later step forwards only the selected rows through all layers
// (write-at-slots: their fresh K/V overwrite their slots, they attend to the whole cached
// canvas) while every other token keeps stale K/V. The rows of the next step are
//   stage 1: the top-k masks by confidence x certainty density inside the search window, with
//            the current block biased first (Dream: the row before each, right-shifted
//            logits), plus the positions decoded this step;
//   stage 2: the nucleus (p) of the attention-rollout importance over the remaining tokens,
//            from the head-averaged attention rows of this step's forward.
// Decoding is certainty-prior: score = confidence x density over the decodable masks of the
// current block (those whose logit row was computed), the top n per step (n from the block's
// step schedule, 1 by default) or, with a threshold, every score >= threshold (top n when fewer).
// Greedy only: the confidence is p(argmax), as the reference runs it (temperature 0).
#pragma once

#include "decode/decoder.h"

namespace dllm {

class D2CacheDecoder final : public Decoder {
 public:
  D2CacheDecoder(const ModelConfig& config, const DecodeParams& params,
                 const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override { return total_; }

  // Rows forwarded by the most recent forward (for statistics and tests).
  const std::vector<int32_t>& last_rows() const { return rows_; }

 private:
  bool block_has_masks(int32_t block) const;
  // on_step_end: the rows of the next forward (d2cache.py:176-298).
  void select_next_rows(const SequenceResult& result, const std::vector<int32_t>& decoded);

  DecodeParams params_;
  int32_t mask_id_;
  int32_t shift_;  // Dream: token j from logit row j - 1
  int32_t prompt_len_, gen_len_, block_len_, steps_per_block_;
  int64_t total_;
  std::vector<int32_t> x_;  // the canvas
  int32_t block_ = 0, step_in_block_ = 0;
  bool cache_filled_ = false;
  std::vector<int32_t> next_rows_;  // canvas positions of the next forward (after step 0)
  std::vector<int32_t> rows_;       // the planned forward's rows
  std::vector<int32_t> out_gen_;    // generation index of each requested output row
  std::vector<double> conf_cache_;  // stage-1 confidences (method-specs §4.6 quirk 1)
  bool have_conf_cache_ = false;
};

}  // namespace dllm
