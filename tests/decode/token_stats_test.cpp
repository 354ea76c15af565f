// TokenStats against a direct double-precision reference, and the filter semantics of the
// reference implementations (ties at top-k, the token that crosses top-p stays, filter order).
#include "decode/token_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace dllm {
namespace {

std::vector<double> softmax(const std::vector<double>& x) {
  double mx = -INFINITY;
  for (double v : x) mx = std::max(mx, v);
  std::vector<double> p(x.size());
  double z = 0;
  for (size_t i = 0; i < x.size(); ++i) z += p[i] = std::isinf(x[i]) ? 0.0 : std::exp(x[i] - mx);
  for (double& v : p) v /= z;
  return p;
}

TEST(TokenStats, RawStatisticsMatchDirectComputation) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0, 3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(257);
    for (auto& v : logits) v = d(rng);
    const TokenStats st = compute_token_stats(logits, SamplerConfig{}, 0.0);
    const auto p = softmax(std::vector<double>(logits.begin(), logits.end()));
    const auto top = std::max_element(p.begin(), p.end()) - p.begin();
    std::vector<double> sorted = p;
    std::sort(sorted.rbegin(), sorted.rend());
    double h = 0;
    for (double v : p) h -= v * std::log(v);
    EXPECT_EQ(st.argmax, top);
    EXPECT_EQ(st.token, top) << "greedy";
    EXPECT_NEAR(st.p_max, sorted[0], 1e-6);
    EXPECT_NEAR(st.margin, sorted[0] - sorted[1], 1e-6);
    EXPECT_NEAR(st.entropy, h, 1e-5);
    EXPECT_NEAR(st.p_token_tempered, sorted[0], 1e-6);
  }
}

// Samplers whose filters keep every logit skip the second softmax and the tempered one
// (token_stats.cpp). A top-k of vocabulary - 1 over logits whose two smallest values are equal
// also keeps every logit (ties at the boundary stay) but takes the long path: both must agree
// to the bit, for greedy and for T = 1 sampling, with banned tokens.
TEST(TokenStats, FiltersThatKeepEverythingGiveTheLongPathsBits) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0, 4);
  const auto same = [](const TokenStats& a, const TokenStats& b) {
    EXPECT_EQ(a.argmax, b.argmax);
    EXPECT_EQ(a.token, b.token);
    for (auto [x, y] : {std::pair{a.p_max, b.p_max}, {a.entropy, b.entropy}, {a.margin, b.margin},
                        {a.p_token, b.p_token}, {a.p_token_tempered, b.p_token_tempered},
                        {a.entropy_filtered, b.entropy_filtered},
                        {a.margin_filtered, b.margin_filtered}, {a.p_token_raw, b.p_token_raw}})
      EXPECT_EQ(std::bit_cast<uint32_t>(x), std::bit_cast<uint32_t>(y));
  };
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<float> logits(1000);
    for (auto& v : logits) v = d(rng);
    const auto lowest = std::min_element(logits.begin(), logits.end());
    logits[(lowest - logits.begin() + 1) % logits.size()] = *lowest;  // the smallest, twice
    SamplerConfig shortcut;
    if (trial % 2) {
      shortcut.temperature = 1.0f;
      shortcut.banned_tokens = {3, 999};
    }
    SamplerConfig long_path = shortcut;
    long_path.top_k = static_cast<int32_t>(logits.size()) - 1;
    const double u = (trial + 0.5) / 40.0;
    same(compute_token_stats(logits, shortcut, u), compute_token_stats(logits, long_path, u));
  }
}

TEST(TokenStats, SamplingFollowsInverseCdfOfTemperedDistribution) {
  std::vector<float> logits = {1.0f, 2.0f, 0.5f, 3.0f};
  SamplerConfig s;
  s.temperature = 2.0f;
  std::vector<double> scaled;
  for (float v : logits) scaled.push_back(v / 2.0);
  const auto p = softmax(scaled);
  double cum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    // A draw just below and just above each cumulative boundary.
    const TokenStats lo = compute_token_stats(logits, s, cum + p[i] * 0.01);
    EXPECT_EQ(lo.token, static_cast<int32_t>(i));
    EXPECT_NEAR(lo.p_token, p[i], 1e-6);
    EXPECT_NEAR(lo.p_token_tempered, p[i], 1e-6);
    cum += p[i];
  }
  // Over many draws the frequencies follow p.
  std::vector<int> count(4, 0);
  for (int i = 0; i < 20000; ++i)
    ++count[static_cast<size_t>(
        compute_token_stats(logits, s, uniform({3, 0, 0}, i, RngStream::kTokenSample)).token)];
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(count[i] / 20000.0, p[i], 0.015);
}

TEST(TokenStats, TopKKeepsTiesAndTopPKeepsTheCrossingToken) {
  // top-k = 2 with a tie at the 2nd value keeps all three tied/greater logits.
  std::vector<float> logits = {5.0f, 3.0f, 3.0f, 1.0f};
  SamplerConfig s;
  s.temperature = 1.0f;
  s.top_k = 2;
  EXPECT_EQ(compute_token_stats(logits, s, 0.999).token, 2);
  const auto p = softmax({5.0, 3.0, 3.0});
  EXPECT_NEAR(compute_token_stats(logits, s, 0.0).p_token, p[0], 1e-6);
  // top-p: probabilities ~ {0.64, 0.24, 0.09, 0.03}; p = 0.7 keeps the first two (the second
  // crosses 0.7), p = 0.6 keeps only the first.
  logits = {2.0f, 1.0f, 0.0f, -1.0f};
  s = SamplerConfig{};
  s.temperature = 1.0f;
  s.top_p = 0.7f;
  TokenStats st = compute_token_stats(logits, s, 0.99);
  EXPECT_EQ(st.token, 1);
  const auto q = softmax({2.0, 1.0});
  EXPECT_NEAR(st.p_token, q[1], 1e-6);
  EXPECT_NEAR(st.margin_filtered, q[0] - q[1], 1e-6);
  s.top_p = 0.6f;
  EXPECT_EQ(compute_token_stats(logits, s, 0.99).token, 0);
  EXPECT_FLOAT_EQ(compute_token_stats(logits, s, 0.99).p_token, 1.0f);
}

TEST(TokenStats, FilterOrderMatters) {
  // After /T = 0.5 the distribution is sharper ({0.87, 0.12, 0.02}): top-p 0.8 keeps only token
  // 0; without the temperature first (WeDLM order, {0.67, 0.24, 0.09}) it keeps two tokens.
  std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  SamplerConfig s;
  s.temperature = 0.5f;
  s.top_p = 0.8f;
  s.order = FilterOrder::kTemperatureTopKTopP;
  EXPECT_FLOAT_EQ(compute_token_stats(logits, s, 0.5).p_token, 1.0f);
  s.order = FilterOrder::kTopKTopPTemperature;
  const auto q = softmax({4.0, 2.0});
  EXPECT_NEAR(compute_token_stats(logits, s, 0.0).p_token, q[0], 1e-6);
}

TEST(TokenStats, GreedyWithFiltersReportsFilteredProbability) {
  // Greedy + top-k 1 is SDAR's generate.py greedy: p after filtering is exactly 1.
  std::vector<float> logits = {0.1f, 0.7f, 0.2f};
  SamplerConfig s;
  s.top_k = 1;
  const TokenStats st = compute_token_stats(logits, s, 0.0);
  EXPECT_EQ(st.token, 1);
  EXPECT_FLOAT_EQ(st.p_token, 1.0f);
  EXPECT_NEAR(st.p_token_tempered, softmax({0.1, 0.7, 0.2})[1], 1e-6);
}

// LLaDA: x0 = argmax exp(l) / (-log u)^T with one draw per vocabulary entry samples from
// softmax(l / T); checked statistically over many positions (independent of the draw layout).
TEST(TokenStats, GumbelMaxSamplesTheTemperedDistribution) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
  for (float t : {1.0f, 0.5f}) {
    SamplerConfig s;
    s.method = SampleMethod::kGumbelMax;
    s.temperature = t;
    std::vector<double> count(4, 0.0);
    const int n = 20000;
    for (int pos = 0; pos < n; ++pos) {
      const TokenStats st = compute_token_stats(logits, s, RngKey{11, 2, 7}, pos);
      count[static_cast<size_t>(st.token)] += 1.0 / n;
      EXPECT_FLOAT_EQ(st.p_token_raw, static_cast<float>(softmax({0, 1, 2, -1})[st.token]))
          << "LLaDA's confidence: the un-noised softmax at T = 1";
    }
    const auto p = softmax({0.0 / t, 1.0 / t, 2.0 / t, -1.0 / t});
    for (size_t v = 0; v < 4; ++v) EXPECT_NEAR(count[v], p[v], 0.012) << "T " << t << " id " << v;
  }
}

TEST(TokenStats, GumbelMaxUsesOneDrawPerVocabularyEntry) {
  std::vector<float> logits(40);
  for (size_t v = 0; v < logits.size(); ++v) logits[v] = std::sin(static_cast<float>(v)) * 2.0f;
  SamplerConfig s;
  s.method = SampleMethod::kGumbelMax;
  s.temperature = 0.7f;
  s.banned_tokens = {5};
  const RngKey key{3, 1, 4};
  for (int32_t pos : {0, 9, 123}) {
    int32_t best = -1;
    double best_v = -1;
    for (size_t v = 0; v < logits.size(); ++v) {
      const double u = uniform(key, pos, RngStream::kGumbel, static_cast<uint32_t>(v));
      const double val = v == 5 ? 0.0 : std::exp(double(logits[v])) / std::pow(-std::log(u), 0.7f);
      if (val > best_v) best_v = val, best = static_cast<int32_t>(v);
    }
    EXPECT_EQ(compute_token_stats(logits, s, key, pos).token, best) << pos;
  }
  s.temperature = 0.0f;
  EXPECT_EQ(compute_token_stats(logits, s, key, 0).token,
            std::max_element(logits.begin(), logits.end()) - logits.begin())
      << "greedy: the argmax";
  s.temperature = 1.0f;
  EXPECT_THROW(compute_token_stats(logits, s, 0.5), Error) << "needs the key, not one draw";
  s.top_k = 3;
  EXPECT_THROW(s.validate(), Error);
}

TEST(TokenStats, ConfidenceBannedTokensLeaveOnlyTheRawConfidence) {
  // Token 3 is the argmax; banning it from the confidence keeps it chosen with confidence 0
  // (LLaDA's EoT quirk); banning another token renormalises the rest.
  const std::vector<float> logits = {0, 0, 0, 2.0f, 0, 1.0f, 0, 0};
  SamplerConfig s;
  s.confidence_banned_tokens = {3};
  TokenStats st = compute_token_stats(logits, s, 0.0);
  EXPECT_EQ(st.token, 3);
  EXPECT_EQ(st.p_token_raw, 0.0f);
  const double z = std::exp(2.0) + std::exp(1.0) + 6.0;
  EXPECT_NEAR(st.p_max, std::exp(2.0) / z, 1e-7) << "the raw statistics are unchanged";
  s.confidence_banned_tokens = {5};
  st = compute_token_stats(logits, s, 0.0);
  EXPECT_EQ(st.token, 3);
  EXPECT_NEAR(st.p_token_raw, std::exp(2.0) / (std::exp(2.0) + 6.0), 1e-7);
  s.confidence_banned_tokens.clear();
  EXPECT_NEAR(compute_token_stats(logits, s, 0.0).p_token_raw, std::exp(2.0) / z, 1e-7);
}

}  // namespace
}  // namespace dllm
