// dLLM-Cache (method-specs §6.3; the d2Cache repository's port, which d2Cache's paper compares
// against) for LLaDA and Dream: vanilla decoding (per step the top-n confidence masks of the
// current semi-AR block, n from the block's step schedule, or every mask >= threshold) over
// forwards that reuse per-layer attention and FFN outputs (DllmCacheStep). Forward t refreshes
// the prompt iff t % K_p == 0 and the response iff t % K_r == 0 (the first forward computes
// everything); other steps refresh the rho fraction of response rows whose values moved most.
#pragma once

#include "decode/decoder.h"

namespace dllm {

class DllmCacheDecoder final : public Decoder {
 public:
  DllmCacheDecoder(const ModelConfig& config, const DecodeParams& params,
                   const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override { return total_; }

 private:
  bool block_has_masks() const;

  DecodeParams params_;
  int32_t mask_id_;
  int32_t shift_;
  int32_t prompt_len_, block_len_, blocks_, steps_per_block_;
  int64_t total_;
  std::vector<int32_t> x_;
  int32_t block_ = 0, step_in_block_ = 0;
  std::vector<int32_t> pending_;
};

}  // namespace dllm
