// S2D2 verification pieces (method-specs §5.2): the 2L verifier mask for position-aligned models,
// the draft mask with a causal decoded prefix (draft_ver, §5.4), and speculative acceptance with
// residual resampling.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/forward_batch.h"
#include "decode/rng.h"
#include "decode/token_stats.h"

namespace dllm {

// Custom mask (attention_rule.h: [n_queries, n_cache + n_queries], keys [cache | queries]) for the
// verifier input [block prefix 0..first_len) | one [MASK] per span offset]:
//   every row sees the whole cache;
//   first-half row r sees first-half keys k <= r (causal);
//   second-half row t (block offset i = span_offsets[t]) sees first-half keys j < i and itself.
// This is the reference's 2L mask with the first half truncated at the end of the span (rows and
// keys past it cannot influence the span rows).
std::vector<uint8_t> verifier_mask_2l(int32_t n_cache, int32_t first_len,
                                      std::span<const int32_t> span_offsets);

// Draft mask for draft_ver: block rows r < prefix_len causal (keys k <= r), the others see the
// whole block; every row sees the cache.
std::vector<uint8_t> draft_prefix_causal_mask(int32_t n_cache, int32_t block_len,
                                              int32_t prefix_len);

// min(1, (q / max(p, 1e-12))^γ).
double acceptance_ratio(double q, double p, double gamma);

// A draw from (q - p)+ / Z by inverse CDF in id order with `u` in [0, 1) (double accumulation);
// from q itself when Z == 0.
int32_t residual_sample(std::span<const double> q, std::span<const double> p, double u);

// SpanVerify's host semantics (the CPU backend; the CUDA backend when the sampler filters with
// top-k/top-p): for output row i, q = sampling_distribution(verifier row i), p =
// sampling_distribution(kept row draft_rows[i]), and {q(x), p(x), residual_sample(q, p, u)}.
// Rows are vocab floats each; errors name a draft row outside the kept rows.
std::vector<VerifyRow> verify_span_rows(std::span<const float> verifier_logits,
                                        std::span<const float> kept_logits, int64_t vocab,
                                        const SpanVerify& verify, const SamplerConfig& sampler);

// SequenceForward::want_span_stats on the host (the CPU backend; the CUDA backend when the
// statistics were computed from copied rows): span_row_stats of sampling_distribution(row i) and
// stats[i].token, for every output row.
std::vector<SpanRowStats> span_stats_on_host(const SequenceForward& seq,
                                             std::span<const float> logits,
                                             const std::vector<TokenStats>& stats, int64_t vocab);

// SequenceForward::want_span_stats of a greedy row from its merged statistics (the devices'
// reduced rows, vocab_parallel_stats.h): H / ln V, margin, sum of p^2, p of the argmax.
SpanRowStats greedy_span_stats(const TokenStats& stats, double collision, int64_t vocab);

// RNG draws of one verification: the accept uniform of the token at `position` and the residual
// uniform (RngStream::kAccept, indices 0 and 1), keyed by the verify forward's step.
inline double accept_uniform(const RngKey& key, int32_t position) {
  return uniform(key, position, RngStream::kAccept, 0);
}
inline double residual_uniform(const RngKey& key, int32_t position) {
  return uniform(key, position, RngStream::kAccept, 1);
}

}  // namespace dllm
