// Decoder: a strategy as a small state machine over host-side token arrays (DESIGN.md).
//   plan()    -> the next forward (tokens, positions, rule, cache write, rows wanted)
//   observe() <- that forward's per-row TokenStats; unmask / commit
// Decoders never see tensors. Generated tokens become *final* once they can no longer change and
// every token before them is final; the engine streams them and applies stop rules and max_tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/forward_batch.h"
#include "model/model_config.h"

namespace dllm {

// How a block decoder turns TokenStats into the confidence its unmasking rule compares.
enum class ConfidenceKind {
  kTempered,  // p(token) under softmax(logits / T) before top-k/top-p (SDAR evaluation path;
              // default)
  kFiltered,  // p(token) under the filtered distribution (SDAR generate.py)
};

// Everything a decoder reads; family defaults are filled in by resolve_decode_params().
struct DecodeParams {
  std::string strategy;      // "block" | "ar" | "wedlm"
  int32_t max_tokens = 256;  // generated tokens at most (stop token excluded)
  int32_t block_length = 0;
  int32_t steps = 0;             // denoising steps per block
  float threshold = -1.0f;       // < 0: family default
  std::string remasking;         // low_confidence_dynamic | low_confidence_static | sequential
  int32_t sub_block_length = 0;  // Fast-dLLM v2 sub-blocks
  ConfidenceKind confidence = ConfidenceKind::kTempered;
  // WeDLM streaming parallel decoding (method-specs §3); unset: family defaults.
  std::optional<int32_t> window;           // W slots after the committed prefix (16)
  std::optional<float> entropy_threshold;  // tau in nats (0.4); -inf = none: one token per step
  std::optional<float> pos_penalty;        // lambda per window slot (0.02)
  // Pads every window forward to 2W queries with trailing masks (exact under causal attention):
  // one fixed forward shape per step, which a CUDA graph can capture.
  bool pad_window = true;
  SamplerConfig sampler;
  uint64_t seed = 0;
  uint32_t sequence_id = 0;
};

// One strategy-specific number for the stats line and JSON (WeDLM's p_cache, ...).
struct DecoderMetric {
  std::string name;
  double value = 0;
  bool is_count = false;  // an integer count (printed without decimals)
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Fills `fwd` (already reset by the caller) with the next forward; false when finished.
  virtual bool plan(SequenceForward& fwd) = 0;
  virtual void observe(const SequenceResult& result) = 0;
  // Generated tokens that are final, in order (only grows).
  const std::vector<int32_t>& final_tokens() const { return final_; }
  // The generated region as it stands: final tokens, then the undecided window with masks
  // (for traces and trajectory tests).
  virtual std::vector<int32_t> canvas() const = 0;
  // KV cache capacity the decoder will need for this request.
  virtual int64_t cache_capacity() const = 0;
  int64_t forwards() const { return forwards_; }
  // Strategy-specific metrics once generation ended; `generated_tokens` is what the request
  // returned (stop token excluded). Empty for strategies without any.
  virtual std::vector<DecoderMetric> metrics(int64_t generated_tokens) const {
    (void)generated_tokens;
    return {};
  }

 protected:
  std::vector<int32_t> final_;
  int64_t forwards_ = 0;
};

// Fills unset knobs from the family (model-specs) and validates them; errors name the parameter.
DecodeParams resolve_decode_params(const ModelConfig& config, DecodeParams params,
                                   int64_t prompt_tokens);

std::unique_ptr<Decoder> make_decoder(const ModelConfig& config, const DecodeParams& params,
                                      const std::vector<int32_t>& prompt);

}  // namespace dllm
