// S2D2 over LLaDA2.1 token editing (method-specs §5 over model-specs §6.6), as the S2D2
// reference runs LLaDA2.x (phymhan/S2D2 LLaDA2/generate_utils.py, generate_ssd_policy). Blocks
// aligned to absolute positions with the prefix in the KV cache, as --strategy edit
// (token_editing_decoder.h). Each step's draft forward samples every generated row of the block;
// then
//   T2T: token rows whose draw differs with p > editing_threshold are overwritten — the draft
//        alone decides them, whether or not the step verifies;
//   the routing policy (s2d2_policy.h) decides whether the first contiguous masked span C is
//        verified by the 2L forward (s2d2_span.h): its tokens accepted left to right, the first
//        rejection resampled from the residual; only C's decided positions are unmasked then;
//   otherwise M2T (token_editing_rule.h) fills the masks above the threshold, else the most
//        confident one — the reference's fallback with num_to_transfer = 1.
// The verifier's first half is the block after this step's edits with C draft-filled (the
// reference fills every mask; rows past C cannot reach C's verifier rows). Once the block has no
// masks, draft forwards continue while they edit (nothing to verify), at most max_post_steps of
// them; then the block becomes final and one more forward commits it to the cache. A policy that
// never verifies makes this --strategy edit, forward for forward.
//
// Reference lines (phymhan/S2D2 279500ab, LLaDA2/generate_utils.py): post-mask budget 848-853,
// draft forward 857-870, T2T before verification 877-900, verifier first half 902-906, first
// span 908-911, policy 913-955 (an empty span scores -inf, 926: hysteresis switches off — see
// S2d2Router::no_span), 2L verify and acceptance 957-1033, fallback with min_k = min(1, masks)
// 872 and 1035-1059, block end 1067. The paper (§5, Table 3) says only that editing stays on;
// how edits and verification share a step, and the post-mask editing forwards, follow the
// reference. The reference's eval script defaults to max_post_steps 0; the edit presets keep 16.
//
// Randomness: draft draws as --strategy edit's (kTokenSample, keyed by the forward's index; every
// forward counts), accept and residual draws as S2d2Decoder's (keyed by the verify forward).
#pragma once

#include "decode/decoder.h"
#include "decode/s2d2_policy.h"
#include "decode/s2d2_span.h"

namespace dllm {

class S2d2EditDecoder final : public Decoder {
 public:
  S2d2EditDecoder(const ModelConfig& config, const DecodeParams& params,
                  const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override { return static_cast<int64_t>(x_.size()); }
  std::vector<DecoderMetric> metrics(int64_t generated_tokens) const override;
  const SpeculationStats* speculation() const override { return &spec_; }

 private:
  enum class Phase { kPrefill, kDraft, kVerify, kCommit, kDone };
  int32_t block_start() const { return block_ * params_.block_length; }
  bool block_has_mask() const;
  void plan_draft(SequenceForward& fwd, uint32_t index);
  void observe_draft(const SequenceResult& result);
  // C (span_) and what the policy reads of this draft; `current` is the rows before the step.
  SpanContext draft_span(const std::vector<int32_t>& current, const SequenceResult& result);
  void end_step(int32_t unmasked);

  DecodeParams params_;
  int32_t mask_id_;
  int32_t prompt_len_;
  std::vector<int32_t> x_;  // whole canvas: prompt, then masks up to the last block boundary
  int32_t num_blocks_ = 0;
  int32_t block_ = 0;
  Phase phase_ = Phase::kPrefill;
  S2d2Router router_;
  SpeculationStats spec_;
  int32_t post_steps_ = 0;         // forwards of this block that started without masks
  bool had_mask_ = false;          // the current step's block had masks when drafted
  bool edited_ = false;            // the current step overwrote a token (T2T)
  int32_t unmasked_in_block_ = 0;  // the bandit's progress
  std::vector<int32_t> rows_;      // block offsets of the draft forward's output rows
  DraftSpan span_;
  RngKey verify_key_;
  int64_t edits_ = 0;
  int64_t post_forwards_ = 0;
};

}  // namespace dllm
