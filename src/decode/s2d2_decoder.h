// S2D2 (method-specs §5): training-free self-speculative decoding for block diffusion. The
// family's block decoder drafts (SDAR and LLaDA2.x: block-causal denoising forward; Fast-dLLM v2:
// the current sub-block's right-shifted rows); a routing policy (s2d2_policy.h) decides whether the
// first contiguous masked span C is verified by the same model in block-size-1 (autoregressive)
// mode in one extra forward:
//   SDAR, LLaDA2.x (position-aligned): [block prefix up to end(C), masks draft-filled | one
//     [MASK] per position of C] under the 2L mask (s2d2_verify.h);
//   Fast-dLLM v2 (right-shifted): the block prefix up to end(C), draft-filled, causal; token i is
//     verified by the logit at i - 1.
// Tokens of C are accepted left to right with probability min(1, (q/p)^γ); the first rejected
// position is resampled from (q - p)+ (q when that mass is 0) and unmasked; the span stops there.
// SDAR falls back to its remasking rule when a step decoded fewer than the schedule's k tokens
// (LLaDA2.x: LLaDA2.0's — low_confidence_dynamic, threshold 0.95 on the filtered probability, the
// resolved DecodeParams say so; tools/reference_llada2_methods.py is its reference);
// Fast-dLLM v2 uses its native threshold rule when the step does not verify.
//
// Randomness (tools/reference_s2d2.py reproduces it): draft tokens as in the block decoders
// (kTokenSample, keyed by the draft forward's index); the accept draw of the token at position i
// is uniform(key, i, kAccept, 0) and its residual draw uniform(key, i, kAccept, 1), keyed by the
// verify forward's index. The draft (p) and verifier (q) distributions are the sampling
// distributions (temperature, top-k, top-p; T = 1 when greedy), computed on the host from the
// logits rows the forward returns (want_logits).
#pragma once

#include <optional>

#include "decode/decoder.h"
#include "decode/s2d2_policy.h"
#include "decode/s2d2_span.h"

namespace dllm {

class S2d2Decoder final : public Decoder {
 public:
  S2d2Decoder(const ModelConfig& config, const DecodeParams& params,
              const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override;
  const SpeculationStats* speculation() const override { return &spec_; }

 private:
  enum class Phase { kPrefill, kDraft, kVerify, kCommit, kDone };
  int32_t block_start() const;
  bool block_has_mask() const;
  void observe_draft(const SequenceResult& result);
  void observe_verify(const SequenceResult& result);
  // SDAR: the remasking rule on the masks left when fewer than k were decoded this step.
  void finish_step(int32_t decoded);
  void open_block();  // Fast-dLLM v2: pad with masks to the next block boundary
  void update_final();

  DecodeParams params_;
  bool shifted_;  // Fast-dLLM v2
  int32_t mask_id_;
  int32_t prompt_len_;
  std::vector<int32_t> x_;
  std::vector<int32_t> schedule_;
  int32_t num_blocks_ = 0;  // SDAR
  int32_t block_ = 0;       // SDAR: current block
  int32_t cached_ = 0;      // Fast-dLLM v2: committed tokens == block start
  int32_t step_ = 0;        // SDAR: denoising step within the block
  int32_t decoded_in_block_ = 0;
  Phase phase_ = Phase::kDraft;
  S2d2Router router_;
  SpeculationStats spec_;

  // The last draft: block offsets asked about, with their tokens and confidences.
  struct Draft {
    int32_t offset;
    int32_t token;
    float p;           // probability under the sampling distribution (p_token)
    float confidence;  // what the family's unmasking rule compares
  };
  std::vector<Draft> draft_;
  DraftSpan span_;  // C
  RngKey verify_key_;
};

}  // namespace dllm
