// WeDLM streaming parallel decoding (method-specs §3.2, papers/wedlm.txt §5.2): causal diffusion
// with topological reordering.
//
// After a causal prefill of the prompt (its logits are discarded) the decoder keeps a window of
// W slots right after the committed prefix: filled tokens not committed yet and [MASK]s. Each step
// is one forward: (a) refill as many masks as leading filled slots, (b) reorder filled-first with
// logical RoPE positions kept, (c) causal forward over the cache appending the window's K/V in
// physical order, (d) commit the leading filled run (append_count), (e) fill masks whose
// entropy + λ·distance-from-first-mask is below τ, else the single best.
#pragma once

#include "decode/decoder.h"

namespace dllm {

class WedlmDecoder final : public Decoder {
 public:
  WedlmDecoder(const ModelConfig& config, const DecodeParams& params,
               const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  // Committed tokens, then the window in logical order.
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override {
    return static_cast<int64_t>(prompt_.size()) + params_.max_tokens + 2 * window_size_;
  }
  // p_cache = N_gen / N_fwd (papers/wedlm.txt eq. 4), decode forwards, window tokens forwarded.
  std::vector<DecoderMetric> metrics(int64_t generated_tokens) const override;

 private:
  int32_t leading_filled() const;

  DecodeParams params_;
  int32_t mask_id_;
  int32_t window_size_;
  float threshold_;
  float penalty_;
  std::vector<int32_t> prompt_;
  std::vector<int32_t> window_;  // slot i sits at logical position prompt + committed + i
  bool prefilled_ = false;
  int32_t pending_commit_ = 0;      // leading filled slots the planned forward commits
  std::vector<int32_t> mask_rows_;  // forward rows of the planned forward's masks, window order
  int64_t window_tokens_ = 0;       // N_fwd: window queries forwarded after the prefill
  int64_t decode_forwards_ = 0;     // forwards after the prefill
};

}  // namespace dllm
