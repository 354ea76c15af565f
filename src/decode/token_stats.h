// TokenStats: the few numbers per output row a decoder needs, computed by the backend from the
// logits so full-vocabulary rows never reach the decoder (DESIGN.md, "The forward contract").
//
// Two distributions matter:
//   raw       softmax(logits)                                   -> argmax, p_max, entropy, margin
//   sampling  softmax(filter(logits / T)) with top-k / top-p    -> token, p_token, filtered
//             entropy and margin; the order of temperature and filters is per family.
// Families differ in which one their confidence uses (model-specs §8.5), so both are reported.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "decode/rng.h"

namespace dllm {

// Where temperature and the two filters apply, as each reference implementation does it.
enum class FilterOrder {
  kTemperatureTopKTopP,  // logits/T -> top-k -> top-p (Hugging Face, SDAR, Fast-dLLM v2)
  kTemperatureTopPTopK,  // logits/T -> top-p -> top-k (Dream)
  kTopKTopPTemperature,  // top-k -> top-p on raw logits, then /T (WeDLM)
};

struct SamplerConfig {
  float temperature = 0.0f;  // <= 0: greedy (argmax of the filtered raw logits)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // >= 1: off
  FilterOrder order = FilterOrder::kTemperatureTopKTopP;
  // Tokens that must never be chosen (their logits act as -inf everywhere, raw statistics
  // included): the mask token, so a decoder never "decides" a mask; LLaDA's logits_eos_inf.
  std::vector<int32_t> banned_tokens;

  bool greedy() const { return !(temperature > 0.0f); }
  void validate() const;  // Error naming the bad parameter
};

struct TokenStats {
  // Raw distribution softmax(logits).
  int32_t argmax = -1;
  float p_max = 0;    // probability of argmax
  float entropy = 0;  // nats
  float margin = 0;   // top1 - top2 probability
  // Sampling distribution.
  int32_t token = -1;  // sampled token (argmax when greedy)
  float p_token = 0;   // its probability under the filtered distribution
  float p_token_tempered =
      0;  // its probability under softmax(logits / T) before filtering (T = 1 when greedy)
  float entropy_filtered = 0;  // entropy of the filtered distribution
  float margin_filtered = 0;   // top1 - top2 of the filtered distribution
};

// Reference implementation (the CPU backend uses it directly; CUDA kernels are tested against it).
// `u` is the uniform draw for sampling (ignored when greedy).
TokenStats compute_token_stats(std::span<const float> logits, const SamplerConfig& sampler,
                               double u);

}  // namespace dllm
