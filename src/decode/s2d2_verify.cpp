#include "decode/s2d2_verify.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"
#include "decode/s2d2_policy.h"

namespace dllm {

std::vector<uint8_t> verifier_mask_2l(int32_t n_cache, int32_t first_len,
                                      std::span<const int32_t> span_offsets) {
  const int32_t n_span = static_cast<int32_t>(span_offsets.size());
  const int32_t nq = first_len + n_span, cols = n_cache + nq;
  std::vector<uint8_t> m(static_cast<size_t>(nq) * static_cast<size_t>(cols), 0);
  auto at = [&](int32_t r, int32_t c) -> uint8_t& {
    return m[static_cast<size_t>(r) * static_cast<size_t>(cols) + static_cast<size_t>(c)];
  };
  for (int32_t r = 0; r < nq; ++r)
    for (int32_t c = 0; c < n_cache; ++c) at(r, c) = 1;
  for (int32_t r = 0; r < first_len; ++r)
    for (int32_t k = 0; k <= r; ++k) at(r, n_cache + k) = 1;
  for (int32_t t = 0; t < n_span; ++t) {
    const int32_t row = first_len + t;
    for (int32_t j = 0; j < std::min(span_offsets[static_cast<size_t>(t)], first_len); ++j)
      at(row, n_cache + j) = 1;
    at(row, n_cache + row) = 1;
  }
  return m;
}

std::vector<uint8_t> draft_prefix_causal_mask(int32_t n_cache, int32_t block_len,
                                              int32_t prefix_len) {
  const int32_t cols = n_cache + block_len;
  std::vector<uint8_t> m(static_cast<size_t>(block_len) * static_cast<size_t>(cols), 1);
  for (int32_t r = 0; r < std::min(prefix_len, block_len); ++r)
    for (int32_t k = r + 1; k < block_len; ++k)
      m[static_cast<size_t>(r) * static_cast<size_t>(cols) + static_cast<size_t>(n_cache + k)] = 0;
  return m;
}

double acceptance_ratio(double q, double p, double gamma) {
  const double r = std::max(q, 0.0) / std::max(p, 1e-12);
  return std::min(1.0, gamma == 1.0 ? r : std::pow(r, gamma));
}

int32_t residual_sample(std::span<const double> q, std::span<const double> p, double u) {
  std::vector<double> w(q.size());
  double z = 0;
  for (size_t i = 0; i < q.size(); ++i) z += w[i] = std::max(q[i] - p[i], 0.0);
  if (!(z > 0)) {
    w.assign(q.begin(), q.end());
    z = 0;
    for (double v : w) z += v;
  }
  const double target = u * z;
  double cum = 0;
  int32_t last = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    cum += w[i];
    if (cum > target) return last;
  }
  return last;  // u within rounding of 1
}

std::vector<VerifyRow> verify_span_rows(std::span<const float> verifier_logits,
                                        std::span<const float> kept_logits, int64_t vocab,
                                        const SpanVerify& verify, const SamplerConfig& sampler) {
  const size_t v = static_cast<size_t>(vocab);
  const size_t kept = kept_logits.size() / v;
  std::vector<VerifyRow> out(verify.draft_rows.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t d = static_cast<size_t>(verify.draft_rows[i]);
    if (d >= kept) fail("verify: draft row ", d, " but the draft forward kept ", kept, " rows");
    const auto q = sampling_distribution(verifier_logits.subspan(i * v, v), sampler);
    const auto p = sampling_distribution(kept_logits.subspan(d * v, v), sampler);
    const size_t x = static_cast<size_t>(verify.draft_tokens[i]);
    out[i] = {q[x], p[x], residual_sample(q, p, verify.residual_u[i])};
  }
  return out;
}

std::vector<SpanRowStats> span_stats_on_host(const SequenceForward& seq,
                                             std::span<const float> logits,
                                             const std::vector<TokenStats>& stats, int64_t vocab) {
  const size_t v = static_cast<size_t>(vocab);
  const int64_t m = static_cast<int64_t>(stats.size());
  std::vector<SpanRowStats> out(stats.size());
  // A vocabulary-sized softmax per row: worth a thread from 16K entries on.
  parallel_for(
      m,
      [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) {
          const size_t r = static_cast<size_t>(i);
          out[r] = span_row_stats(sampling_distribution(logits.subspan(r * v, v), seq.sampler),
                                  stats[r].token);
        }
      },
      vocab >= (1 << 14) ? 1 : m);
  return out;
}

SpanRowStats greedy_span_stats(const TokenStats& stats, double collision, int64_t vocab) {
  const double log_v = std::log(static_cast<double>(vocab));
  return {vocab > 1 ? stats.entropy / log_v : 0.0, stats.margin, collision, stats.p_max};
}

}  // namespace dllm
