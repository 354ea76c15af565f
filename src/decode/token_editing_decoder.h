// LLaDA2.1 joint mask-to-token (M2T) + token-to-token (T2T) decoding (model-specs §6.6; the
// LLaDA2.1 generate() and SGLang's JointThreshold): blocks of B aligned to absolute positions with
// the prefix in the KV cache, as the block decoder. Each denoising forward samples every
// generated row of the block; then
//   M2T: masks whose p > threshold are filled — if none, the single most confident mask;
//   T2T: already-filled, non-prompt rows whose sampled token differs and has p > editing_threshold
//        are overwritten.
// Once the block has no masks, forwards continue while they still edit, at most max_post_steps
// of them. The finished block becomes final (T2T may rewrite any of its tokens until then) and is
// committed to the cache by one more forward.
// Sparse attention (MAGE, Quest) as in the block decoder: MAGE selects at a block's first forward
// and attends through that set in every later one — post-mask editing steps and the commit
// included (method-specs §1.5).
#pragma once

#include "attention/sparse_schedule.h"
#include "decode/decoder.h"

namespace dllm {

class TokenEditingDecoder final : public Decoder {
 public:
  TokenEditingDecoder(const ModelConfig& config, const DecodeParams& params,
                      const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override { return static_cast<int64_t>(x_.size()); }
  std::vector<DecoderMetric> metrics(int64_t generated_tokens) const override;

 private:
  enum class Phase { kPrefill, kDenoise, kCommit, kDone };
  void observe_denoise(const SequenceResult& result);
  int32_t block_start() const { return block_ * params_.block_length; }
  bool block_has_mask() const;

  DecodeParams params_;
  int32_t mask_id_;
  int32_t prompt_len_;
  std::vector<int32_t> x_;  // whole canvas: prompt, then masks up to the last block boundary
  int32_t num_blocks_ = 0;
  int32_t block_ = 0;
  Phase phase_ = Phase::kPrefill;
  uint32_t rng_steps_ = 0;     // forwards so far (keys the random stream)
  int32_t post_steps_ = 0;     // forwards of this block that started without masks
  bool had_mask_ = false;      // the current forward's block had masks when planned
  std::vector<int32_t> rows_;  // block offsets of the rows asked about in the last plan
  int64_t edits_ = 0;          // T2T overwrites, for the stats
  int64_t post_forwards_ = 0;  // forwards spent after a block's masks were gone
  SparseSchedule sparse_;
};

}  // namespace dllm
