// SDAR block diffusion (model-specs §1.5): blocks of B aligned to absolute positions (the prompt
// tail shares the first block), prefill of floor(P/B)*B prompt tokens, S denoising forwards per
// block that do not write the cache, then one commit forward (append) of the finished block — or,
// with fuse_commit, the commit rows in front of the next block's first denoising step.
#pragma once

#include "attention/sparse_schedule.h"
#include "decode/decoder.h"

namespace dllm {

class BlockDiffusionDecoder final : public Decoder {
 public:
  BlockDiffusionDecoder(const ModelConfig& config, const DecodeParams& params,
                        const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override { return static_cast<int64_t>(x_.size()); }
  std::vector<DecoderMetric> metrics(int64_t generated_tokens) const override;

 private:
  enum class Phase { kPrefill, kDenoise, kCommit, kDone };
  // Fills the denoising rows of the current block (after `offset` rows already in `fwd`).
  void plan_denoise(SequenceForward& fwd, int32_t offset, uint32_t rng_step);
  void observe_denoise(const SequenceResult& result);
  int32_t block_start() const { return block_ * params_.block_length; }
  bool block_has_mask() const;
  void update_final();

  DecodeParams params_;
  int32_t mask_id_;
  int32_t prompt_len_;
  std::vector<int32_t> x_;  // whole canvas: prompt, then masks up to the last block boundary
  std::vector<int32_t> schedule_;
  int32_t num_blocks_ = 0;
  int32_t block_ = 0;  // current block index
  int32_t step_ = 0;   // denoising step within the block
  Phase phase_ = Phase::kPrefill;
  bool fused_ = false;      // the last plan committed a block and denoised the next
  uint32_t rng_steps_ = 0;  // forwards as the unfused loop counts them (keys the random stream)
  std::vector<int32_t> pending_rows_;  // block offsets of the masks asked about in the last plan
  SparseSchedule sparse_;
};

}  // namespace dllm
