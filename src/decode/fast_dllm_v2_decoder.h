// Fast-dLLM v2 (model-specs §3.3): right-shifted logits; blocks of B (32) aligned to absolute
// positions, decoded in sub-blocks (8) left to right with a threshold rule that always unmasks
// the most confident mask; a finished block is committed with one forward whose last logit gives
// the first token of the next block (autoregressively).
//
// Difference from the reference generate(): we always prefill floor(P/B)*B prompt tokens; the
// reference skips the prefill when P == B and then decodes the first block without the prompt.
#pragma once

#include "attention/sparse_schedule.h"
#include "decode/decoder.h"

namespace dllm {

class FastDllmV2Decoder final : public Decoder {
 public:
  FastDllmV2Decoder(const ModelConfig& config, const DecodeParams& params,
                    const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override;
  std::vector<DecoderMetric> metrics(int64_t generated_tokens) const override;

 private:
  enum class Phase { kPrefill, kDenoise, kCommit };
  int32_t block_start() const { return cached_; }
  void open_block();  // pads x_ with masks up to the next block boundary
  void update_final();

  DecodeParams params_;
  int32_t mask_id_;
  int32_t prompt_len_;
  std::vector<int32_t> x_;
  int32_t cached_ = 0;  // tokens committed to the KV cache == start of the current block
  Phase phase_ = Phase::kDenoise;
  std::vector<int32_t> pending_;  // block offsets asked about in the last denoising plan
  SparseSchedule sparse_;
};

}  // namespace dllm
