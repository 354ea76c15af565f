// Decoder: a strategy as a small state machine over host-side token arrays (DESIGN.md).
//   plan()    -> the next forward (tokens, positions, rule, cache write, rows wanted)
//   observe() <- that forward's per-row TokenStats; unmask / commit
// Decoders never see tensors. Generated tokens become *final* once they can no longer change and
// every token before them is final; the engine streams them and applies stop rules and max_tokens.
#pragma once

#include <cstdint>
#include <memory>
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
  std::string strategy;      // "block" | "ar"
  int32_t max_tokens = 256;  // generated tokens at most (stop token excluded)
  int32_t block_length = 0;
  int32_t steps = 0;             // denoising steps per block
  float threshold = -1.0f;       // < 0: family default
  std::string remasking;         // low_confidence_dynamic | low_confidence_static | sequential
  int32_t sub_block_length = 0;  // Fast-dLLM v2 sub-blocks
  ConfidenceKind confidence = ConfidenceKind::kTempered;
  SamplerConfig sampler;
  uint64_t seed = 0;
  uint32_t sequence_id = 0;
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
