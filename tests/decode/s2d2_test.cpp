// S2D2 pieces (method-specs §5): the 2L verifier mask against a naive construction of the
// reference's full mask, residual resampling against (q - p)+ / Z, acceptance estimators and
// policy decisions on scripted statistics, and the property that makes speculative decoding
// faithful: with always-on verification the accepted tokens follow the verifier's distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "attention/attention_rule.h"
#include "decode/rng.h"
#include "decode/s2d2_policy.h"
#include "decode/s2d2_verify.h"

namespace dllm {
namespace {

// The reference's mask over [cache | first half (L) | second half (L)], built entry by entry
// from the paper's block form [[A_L, 0], [A_L^<, I_L]].
bool naive_2l(int32_t n_cache, int32_t L, int32_t row, int32_t col) {
  if (col < n_cache) return true;
  const int32_t c = col - n_cache;
  if (row < L) return c < L && c <= row;  // A_L: causal first half
  const int32_t i = row - L;              // second-half row of block offset i
  if (c < L) return c < i;                // A_L^<: strictly earlier draft tokens
  return c - L == i;                      // I_L: itself
}

TEST(S2d2Mask, VerifierMaskIsTheReference2LMaskTruncatedAtTheSpanEnd) {
  for (int32_t n_cache : {0, 3, 8})
    for (int32_t L : {1, 4, 8})
      for (int32_t c0 = 0; c0 < L; ++c0)
        for (int32_t end = c0 + 1; end <= L; ++end) {
          std::vector<int32_t> span(static_cast<size_t>(end - c0));
          std::iota(span.begin(), span.end(), c0);
          const auto m = verifier_mask_2l(n_cache, end, span);
          const int32_t nq = end + static_cast<int32_t>(span.size()), cols = n_cache + nq;
          ASSERT_EQ(m.size(), size_t(nq) * size_t(cols));
          // Row / column of the truncated layout in the full 2L layout.
          auto full_index = [&](int32_t q) { return q < end ? q : L + span[size_t(q - end)]; };
          for (int32_t r = 0; r < nq; ++r)
            for (int32_t k = 0; k < cols; ++k) {
              const int32_t fk = k < n_cache ? k : n_cache + full_index(k - n_cache);
              EXPECT_EQ(m[size_t(r) * size_t(cols) + size_t(k)] != 0,
                        naive_2l(n_cache, L, full_index(r), fk))
                  << "cache " << n_cache << " L " << L << " span " << c0 << ".." << end << " row "
                  << r << " col " << k;
            }
          // Nothing the span rows see in the full mask lies past the truncation.
          for (int32_t i : span)
            for (int32_t c = end; c < L; ++c)
              EXPECT_FALSE(naive_2l(n_cache, L, L + i, n_cache + c));
        }
}

TEST(S2d2Mask, CustomRuleCarriesTheMaskThroughBuildVisibility) {
  const std::vector<int32_t> span = {2, 3};
  const auto m = verifier_mask_2l(4, 4, span);
  std::vector<int32_t> cache_pos = {0, 1, 2, 3}, q_pos = {4, 5, 6, 7, 6, 7};
  std::vector<uint8_t> vis;
  build_visibility(AttentionRule::custom(m), cache_pos, q_pos, vis);
  EXPECT_EQ(vis, m);
}

TEST(S2d2Mask, DraftPrefixCausalMask) {
  const auto m = draft_prefix_causal_mask(2, 4, 2);     // rows 0, 1 causal; 2, 3 see the block
  const std::vector<uint8_t> want = {1, 1, 1, 0, 0, 0,  //
                                     1, 1, 1, 1, 0, 0,  //
                                     1, 1, 1, 1, 1, 1,  //
                                     1, 1, 1, 1, 1, 1};
  EXPECT_EQ(m, want);
}

TEST(S2d2Accept, RatioIsTemperedAndCapped) {
  EXPECT_DOUBLE_EQ(acceptance_ratio(0.2, 0.4, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(acceptance_ratio(0.2, 0.4, 2.0), 0.25);
  EXPECT_DOUBLE_EQ(acceptance_ratio(0.2, 0.8, 0.5), 0.5);
  EXPECT_DOUBLE_EQ(acceptance_ratio(0.9, 0.4, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(acceptance_ratio(0.0, 0.4, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(acceptance_ratio(1e-13, 0.0, 1.0), 0.1);  // p clamped at 1e-12
}

// Chi-square-like check: every bucket within 5 sigma of its expected count.
void expect_follows(const std::vector<int64_t>& counts, const std::vector<double>& probs,
                    int64_t n) {
  for (size_t v = 0; v < probs.size(); ++v) {
    const double e = probs[v] * double(n);
    const double sigma = std::sqrt(std::max(e * (1 - probs[v]), 1.0));
    EXPECT_NEAR(double(counts[v]), e, 5 * sigma) << "token " << v;
    if (probs[v] == 0) {
      EXPECT_EQ(counts[v], 0) << "token " << v << " has no mass";
    }
  }
}

TEST(S2d2Residual, DrawsFollowTheNormalisedPositivePart) {
  const std::vector<double> q = {0.1, 0.4, 0.05, 0.3, 0.15, 0.0};
  const std::vector<double> p = {0.3, 0.1, 0.05, 0.2, 0.25, 0.1};
  std::vector<double> want(q.size());
  double z = 0;
  for (size_t v = 0; v < q.size(); ++v) z += want[v] = std::max(q[v] - p[v], 0.0);
  for (double& w : want) w /= z;  // {0, 0.75, 0, 0.25, 0, 0}
  const int64_t n = 200000;
  std::vector<int64_t> counts(q.size(), 0);
  const RngKey key{123, 4, 5};
  for (int64_t i = 0; i < n; ++i)
    ++counts[size_t(residual_sample(q, p, uniform(key, int32_t(i), RngStream::kAccept, 1)))];
  expect_follows(counts, want, n);
}

TEST(S2d2Residual, ZeroMassFallsBackToTheVerifier) {
  const std::vector<double> q = {0.2, 0.5, 0.3};
  const int64_t n = 100000;
  std::vector<int64_t> counts(q.size(), 0);
  const RngKey key{7, 0, 1};
  for (int64_t i = 0; i < n; ++i)  // p == q: (q - p)+ is all zero
    ++counts[size_t(residual_sample(q, q, uniform(key, int32_t(i), RngStream::kAccept, 1)))];
  expect_follows(counts, q, n);
}

// One speculative decision per trial exactly as the decoder makes it: draft x ~ p, accept with
// min(1, q(x)/p(x)), otherwise resample from the residual. The output must follow q.
TEST(S2d2Accept, AlwaysOnVerificationFollowsTheVerifierDistribution) {
  const std::vector<double> p = {0.5, 0.2, 0.1, 0.15, 0.05};
  const std::vector<double> q = {0.1, 0.3, 0.25, 0.15, 0.2};
  const int64_t n = 200000;
  std::vector<int64_t> counts(q.size(), 0);
  int64_t accepted = 0;
  const RngKey draft_key{99, 1, 0}, verify_key{99, 1, 1};
  for (int64_t i = 0; i < n; ++i) {
    const int32_t pos = int32_t(i);
    const double u = uniform(draft_key, pos, RngStream::kTokenSample);
    int32_t x = 0;
    for (double cum = 0; x < int32_t(p.size()); ++x)
      if ((cum += p[size_t(x)]) > u) break;
    if (accept_uniform(verify_key, pos) < acceptance_ratio(q[size_t(x)], p[size_t(x)], 1.0)) {
      ++accepted;
    } else {
      x = residual_sample(q, p, residual_uniform(verify_key, pos));
    }
    ++counts[size_t(x)];
  }
  expect_follows(counts, q, n);
  // Acceptance rate is sum_v min(p_v, q_v) = 0.1 + 0.2 + 0.1 + 0.15 + 0.05 = 0.6.
  EXPECT_NEAR(double(accepted) / double(n), 0.6, 0.01);
}

SpanContext ctx_of(std::vector<std::vector<double>> probs, int32_t n_hi = 0) {
  SpanContext c;
  for (const auto& p : probs)
    c.span_rows.push_back(
        span_row_stats(p, static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin())));
  c.span_length = static_cast<int32_t>(probs.size());
  c.high_confidence = n_hi;
  c.block_length = 4;
  return c;
}

TEST(S2d2Estimators, ScriptedDistributions) {
  const std::vector<double> sharp = {0.9, 0.05, 0.05, 0.0}, flat = {0.25, 0.25, 0.25, 0.25};
  S2d2Params p;
  const auto c = ctx_of({sharp, flat});
  auto alpha = [&](const std::string& e) {
    p.estimator = e;
    return acceptance_estimates(p, c);
  };
  const double h = -(0.9 * std::log(0.9) + 0.1 * std::log(0.05)) / std::log(4.0);
  p.entropy_beta = 2.0;
  auto a = alpha("soft-entropy");
  EXPECT_NEAR(a[0], std::exp(-2.0 * h), 1e-9);
  EXPECT_NEAR(a[1], std::exp(-2.0), 1e-9);
  p.margin_threshold = 0.5;
  EXPECT_EQ(alpha("hard-margin"), (std::vector<double>{1.0, 0.0}));
  p.entropy_threshold = 0.5;
  EXPECT_EQ(alpha("hard-entropy"), (std::vector<double>{1.0, 0.0}));
  p.confidence_power = 2.0;
  a = alpha("confidence-power");
  EXPECT_NEAR(a[0], 0.81, 1e-12);
  EXPECT_NEAR(a[1], 0.0625, 1e-12);
  p.margin_coef = 0.5;
  a = alpha("clipped-linear-margin");
  EXPECT_NEAR(a[0], 0.425, 1e-12);
  EXPECT_NEAR(a[1], 0.0, 1e-12);
  a = alpha("renyi-2");
  EXPECT_NEAR(a[0], 0.815, 1e-12);
  EXPECT_NEAR(a[1], 0.25, 1e-12);
  EXPECT_NEAR(expected_accepted({0.5, 0.5, 2.0}), 0.5 + 0.25 + 0.25, 1e-12);  // α clipped to 1
  EXPECT_NEAR(expected_accepted({0.0, 1.0}), 0.0, 1e-12);
}

TEST(S2d2Policy, SpanAndScore) {
  S2d2Params p;
  p.span_min = 3;
  S2d2Router span(p);
  const std::vector<double> one_hot = {1.0, 0.0};
  EXPECT_FALSE(span.decide(ctx_of({one_hot, one_hot})));
  EXPECT_TRUE(span.decide(ctx_of({one_hot, one_hot, one_hot})));

  p.policy = "score";
  p.estimator = "hard-margin";  // α = 1 for one-hot rows: K = |C|
  p.score_type = "static";
  p.score_cost = 2.0;
  p.score_threshold = 0.0;
  S2d2Router score(p);
  EXPECT_FALSE(score.decide(ctx_of({one_hot})));          // 1 - 2 < 0
  EXPECT_TRUE(score.decide(ctx_of({one_hot, one_hot})));  // 2 - 2 >= 0
  p.score_type = "dynamic";
  p.score_cost = 1.0;
  S2d2Router dynamic(p);
  EXPECT_TRUE(dynamic.decide(ctx_of({one_hot, one_hot}, 2)));   // 2 - 1 * 2 = 0
  EXPECT_FALSE(dynamic.decide(ctx_of({one_hot, one_hot}, 3)));  // 2 - 3 < 0
}

TEST(S2d2Policy, HysteresisStateCarriesOver) {
  S2d2Params p;
  p.policy = "hysteresis";
  p.estimator = "hard-margin";
  p.score_type = "static";
  p.score_cost = 0.0;  // score = K = |C|
  p.hysteresis_on = 2.0;
  p.hysteresis_off = 1.0;
  S2d2Router r(p);
  const std::vector<double> h = {1.0, 0.0};
  auto span = [&](int n) { return ctx_of(std::vector<std::vector<double>>(size_t(n), h)); };
  EXPECT_FALSE(r.decide(span(2)));  // OFF: 2 > 2 is false (strict, as the reference)
  EXPECT_TRUE(r.decide(span(3)));   // turns ON
  EXPECT_TRUE(r.decide(span(1)));   // ON stays: 1 < 1 is false
  EXPECT_TRUE(r.decide(span(2)));
  EXPECT_FALSE(r.decide(ctx_of({{0.5, 0.5}})));  // K = 0 < 1: OFF
  EXPECT_FALSE(r.decide(span(2)));               // OFF again needs > 2
}

TEST(S2d2Policy, BanditTriesUntriedArmsThenFollowsUcb) {
  S2d2Params p;
  p.policy = "bandit";
  p.ucb_span_bins = 1;
  p.ucb_progress_bins = 1;
  p.ucb_entropy_bins = 1;  // one bucket
  p.ucb_beta = 0.0;        // pure exploitation after both arms are tried
  S2d2Router r(p);
  const auto c = ctx_of({{1.0, 0.0}});
  EXPECT_TRUE(r.decide(c));   // both untried: tie -> verify
  r.record(4);                // verify reward 4 / 2 = 2
  EXPECT_FALSE(r.decide(c));  // the untried arm next
  r.record(3);                // no-verify reward 3
  EXPECT_FALSE(r.decide(c));  // 3 > 2
  r.record(1);                // mean (3 + 1) / 2 = 2: tie
  EXPECT_TRUE(r.decide(c));   // ties -> verify
}

TEST(S2d2Policy, BanditBuckets) {
  S2d2Params p;
  p.policy = "bandit";  // bins (2, 2, 2)
  S2d2Router r(p);
  auto c = ctx_of({{1.0, 0.0, 0.0, 0.0}});  // span 1 -> bin 0, entropy 0 -> bin 0
  c.unmasked_in_block = 3;                  // progress 0.75 -> bin 1
  r.decide(c);
  EXPECT_EQ(r.last_bucket(), (0 * 2 + 1) * 2 + 0);
  const std::vector<double> flat(4, 0.25);
  auto d = ctx_of({flat, flat, flat, flat});  // span 4 = B -> bin 1, entropy 1 -> bin 1
  d.unmasked_in_block = 0;
  r.decide(d);
  EXPECT_EQ(r.last_bucket(), (1 * 2 + 0) * 2 + 1);
}

TEST(S2d2Params, BadValuesNameTheParameter) {
  auto msg = [](S2d2Params p) {
    try {
      p.validate();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  S2d2Params p;
  EXPECT_EQ(msg(p), "");
  p.policy = "greedy";
  EXPECT_NE(msg(p).find("--verify-policy"), std::string::npos);
  p = {};
  p.estimator = "entropy";
  EXPECT_NE(msg(p).find("--acceptance-estimator"), std::string::npos);
  p = {};
  p.hysteresis_on = -2;
  EXPECT_NE(msg(p).find("--hysteresis-on"), std::string::npos);
  p = {};
  p.gamma = 0;
  EXPECT_NE(msg(p).find("--accept-gamma"), std::string::npos);
  p = {};
  p.span_min = 0;
  EXPECT_NE(msg(p).find("--verify-span-min"), std::string::npos);
  p = {};
  p.score_type = "difference";
  EXPECT_NE(msg(p).find("--verify-score-type"), std::string::npos);
}

}  // namespace
}  // namespace dllm
