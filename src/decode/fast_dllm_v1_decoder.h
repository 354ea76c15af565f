// Fast-dLLM v1 (method-specs §6.4; NVlabs/Fast-dLLM llada/generate.py and dream's
// generation_utils_block.py) for the full-diffusion families LLaDA and Dream, greedy, with
// threshold parallel decoding: in each semi-AR block, one forward of the whole canvas refreshes
// the entire KV cache, then every step forwards only
//   dual cache:   the block's rows (write-at-slots), attending to the cached prefix AND suffix;
//   prefix cache: the block and everything after it, attending to the cached prefix;
// and unmasks the block's most confident mask plus every other with confidence >= threshold.
// LLaDA decodes from the block-start forward with the same rule; Dream's block-start forward
// fixes only the block's first position (from row s - 1), and its block loop tests for masks
// after the step, so a block finished at block start still costs one block forward.
#pragma once

#include "decode/decoder.h"

namespace dllm {

class FastDllmV1Decoder final : public Decoder {
 public:
  FastDllmV1Decoder(const ModelConfig& config, const DecodeParams& params,
                    const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override { return total_; }

 private:
  bool block_has_masks() const;

  DecodeParams params_;
  int32_t mask_id_;
  bool dream_;
  bool dual_;
  int32_t prompt_len_, block_len_, blocks_;
  int64_t total_;
  std::vector<int32_t> x_;
  int32_t block_ = 0;
  bool block_started_ = false;  // the block-start full forward ran
  bool block_stepped_ = false;  // at least one block forward ran (Dream's post-test loop)
  bool cache_filled_ = false;
  bool planned_full_ = false;     // the planned forward is a block-start full forward
  std::vector<int32_t> pending_;  // canvas positions whose stats the planned forward returns
};

}  // namespace dllm
