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

// How a token is drawn when temperature > 0 (greedy is the argmax either way).
enum class SampleMethod {
  // One uniform u = uniform(key, position, kTokenSample) per row; inverse CDF of the filtered
  // distribution in id order.
  kInverseCdf,
  // LLaDA's Gumbel-max in float64: argmax_v exp(l_v) / (-log u_v)^T with one uniform per
  // vocabulary entry, u_v = uniform(key, position, kGumbel, v) (rng.h: v enters the Philox
  // counter as `stream | v << 8`). No top-k / top-p.
  kGumbelMax,
};

struct SamplerConfig {
  float temperature = 0.0f;  // <= 0: greedy (argmax of the filtered raw logits)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // >= 1: off
  FilterOrder order = FilterOrder::kTemperatureTopKTopP;
  SampleMethod method = SampleMethod::kInverseCdf;
  // Tokens that must never be chosen (their logits act as -inf everywhere, raw statistics
  // included): the mask token, so a decoder never "decides" a mask; LLaDA's logits_eos_inf.
  std::vector<int32_t> banned_tokens;
  // Tokens removed from the distribution of TokenStats::p_token_raw only, after the token was
  // chosen (so they can still be chosen, with confidence 0): LLaDA's confidence_eos_eot_inf.
  std::vector<int32_t> confidence_banned_tokens;

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
  // Its probability under softmax(logits) (T = 1, no filters) with the confidence-banned tokens
  // removed as well (LLaDA's confidence). Equals p_max for greedy decoding without them.
  float p_token_raw = 0;
};

// Reference implementation (the CPU backend uses it directly; CUDA kernels are tested against it).
// Draws come from `rng` at `position`: uniform(rng, position, kTokenSample) for kInverseCdf,
// one kGumbel draw per vocabulary entry for kGumbelMax; none when greedy.
TokenStats compute_token_stats(std::span<const float> logits, const SamplerConfig& sampler,
                               const RngKey& rng, int32_t position);
// The same with the inverse-CDF draw `u` given (ignored when greedy); not for kGumbelMax sampling.
TokenStats compute_token_stats(std::span<const float> logits, const SamplerConfig& sampler,
                               double u);

// LLaDA's Gumbel-max key of one vocabulary entry, in float64 as the reference computes it:
// exp(l) / (-log u)^T (the largest key wins, the first of equal ones).
double gumbel_key(float logit, double u, double temperature);

// The whole sampling distribution of one row: softmax(filter(logits / T)) in the sampler's order,
// banned tokens removed (T = 1 when greedy). S2D2 needs it for the draft and the verifier rows
// (acceptance ratio q/p and the residual (q - p)+).
std::vector<double> sampling_distribution(std::span<const float> logits,
                                          const SamplerConfig& sampler);

}  // namespace dllm
