// LLaDA2.x MoE routing (backend/moe_routing.h) against a naive reference written differently:
// every candidate set is scored by brute force — the kept groups are those no better-ranked group
// displaces, the experts those no better-ranked allowed expert displaces — on fresh random
// logits, with exact ties planted at group and expert boundaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "backend/moe_routing.h"

namespace dllm {
namespace {

// a ranks before b: larger value, or equal value and lower index.
bool ranks_before(float va, int a, float vb, int b) {
  return va > vb || (va == vb && a < b);
}

// The `k` best of `values` as a set, by counting how many rank before each entry.
std::set<int> best_set(const std::vector<float>& values, int k) {
  std::set<int> out;
  for (int i = 0; i < int(values.size()); ++i) {
    int better = 0;
    for (int j = 0; j < int(values.size()); ++j)
      better += j != i && ranks_before(values[size_t(j)], j, values[size_t(i)], i);
    if (better < k) out.insert(i);
  }
  return out;
}

struct Naive {
  std::set<int> experts;
  std::vector<float> weight;  // by expert
};

Naive naive_route(const MoeConfig& m, const float* logits, const std::vector<float>& bias) {
  const int n = int(m.num_experts), per = int(m.experts_per_group());
  std::vector<float> s(static_cast<size_t>(n)), sr(static_cast<size_t>(n));
  for (int e = 0; e < n; ++e) {
    s[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
    sr[size_t(e)] = s[size_t(e)] + (bias.empty() ? 0.0f : bias[size_t(e)]);
  }
  std::vector<float> group(static_cast<size_t>(m.num_groups));
  for (int g = 0; g < int(m.num_groups); ++g) {
    std::vector<float> members(sr.begin() + g * per, sr.begin() + (g + 1) * per);
    std::sort(members.rbegin(), members.rend());
    group[size_t(g)] = members[0] + members[1];
  }
  const auto groups = best_set(group, int(m.groups_per_token));
  std::vector<float> allowed = sr;
  for (int e = 0; e < n; ++e)
    if (!groups.count(e / per)) allowed[size_t(e)] = -INFINITY;
  Naive out;
  out.experts = best_set(allowed, int(m.experts_per_token));
  out.weight.assign(size_t(n), 0.0f);
  double total = 0;
  for (int e : out.experts) total += s[size_t(e)];
  for (int e : out.experts)
    out.weight[size_t(e)] = float(s[size_t(e)] / (total + 1e-20) * m.routed_scaling_factor);
  return out;
}

TEST(MoeRouting, MatchesBruteForceWithTiesAndGroups) {
  for (auto [experts, groups, keep, k] : {std::tuple{256, 8, 4, 8}, std::tuple{16, 4, 2, 4},
                                          std::tuple{12, 3, 1, 3}, std::tuple{8, 1, 1, 2}}) {
    MoeConfig m;
    m.num_experts = experts;
    m.num_groups = groups;
    m.groups_per_token = keep;
    m.experts_per_token = k;
    m.routed_scaling_factor = 2.5;
    std::mt19937 rng(experts * 31 + k);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    const int tokens = 64;
    std::vector<float> logits(static_cast<size_t>(tokens * experts)),
        bias(static_cast<size_t>(experts));
    for (float& b : bias) b = 0.1f * normal(rng);
    for (float& l : logits) l = normal(rng);
    // Exact ties: in every other token, copy some experts' logits (and biases) onto others, so
    // tied experts sit at the top-k and the group boundary.
    for (int t = 0; t < tokens; t += 2)
      for (int j = 0; j < experts / 4; ++j) {
        const int a = int(rng() % experts), b = int(rng() % experts);
        logits[size_t(t * experts + b)] = logits[size_t(t * experts + a)];
      }
    for (int e = 1; e < experts; e += 3) bias[size_t(e)] = bias[size_t(e - 1)];
    for (const bool with_bias : {true, false}) {
      const std::vector<float> b = with_bias ? bias : std::vector<float>{};
      const MoeRouting r = route_experts(m, logits, tokens, b);
      ASSERT_EQ(r.experts.size(), size_t(tokens * k));
      for (int t = 0; t < tokens; ++t) {
        SCOPED_TRACE(testing::Message() << experts << " experts, token " << t);
        const Naive want = naive_route(m, &logits[size_t(t * experts)], b);
        std::set<int> got;
        float sum = 0;
        for (int j = 0; j < k; ++j) {
          const int e = r.experts[size_t(t * k + j)];
          got.insert(e);
          EXPECT_NEAR(r.weights[size_t(t * k + j)], want.weight[size_t(e)], 1e-6f);
          sum += r.weights[size_t(t * k + j)];
        }
        EXPECT_EQ(got, want.experts);
        EXPECT_NEAR(sum, 2.5f, 1e-5f);  // normalised, then scaled
      }
    }
  }
}

TEST(MoeRouting, BiasSteersSelectionButNotWeights) {
  MoeConfig m;
  m.num_experts = 4;
  m.experts_per_token = 1;
  m.routed_scaling_factor = 1.0;
  const std::vector<float> logits = {0.0f, 1.0f, -1.0f, 0.5f};
  const auto plain = route_experts(m, logits, 1, {});
  EXPECT_EQ(plain.experts[0], 1);
  const auto biased = route_experts(m, logits, 1, std::vector<float>{0.0f, 0.0f, 0.9f, 0.0f});
  EXPECT_EQ(biased.experts[0], 2);
  // k = 1: the weight is the un-biased sigmoid score itself (no normalisation).
  EXPECT_NEAR(biased.weights[0], 1.0f / (1.0f + std::exp(1.0f)), 1e-6f);
}

// The closest call is the smaller relative gap of the two cuts, measured on the biased scores:
// here 4 experts in 2 groups of 2, one group kept, 1 expert chosen.
TEST(MoeRouting, ClosestRoutingGapIsTheNarrowerCut) {
  MoeConfig m;
  m.num_experts = 4;
  m.num_groups = 2;
  m.groups_per_token = 1;
  m.experts_per_token = 1;
  const auto logit_of = [](float s) { return std::log(s / (1.0f - s)); };  // sigmoid's inverse
  // Scores 0.9 0.8 | 0.7 0.6: groups 1.7 against 1.3 (gap 0.4 / 1.7); in the kept group, 0.9
  // against 0.8 (0.1 / 0.9, the narrower).
  const std::vector<float> logits = {logit_of(0.9f), logit_of(0.8f), logit_of(0.7f),
                                     logit_of(0.6f)};
  EXPECT_NEAR(closest_routing_gap(m, logits, {}), 0.1 / 0.9, 1e-5);
  // A bias that lifts the second group to 0.7 + 0.45 = 1.15 and 1.05 (2.2 against 1.7): the
  // expert cut is 1.15 against 1.05 now.
  const std::vector<float> bias = {0.0f, 0.0f, 0.45f, 0.45f};
  EXPECT_NEAR(closest_routing_gap(m, logits, bias), 0.1 / 1.15, 1e-5);
  // Every expert of the kept groups chosen, every group kept: no cut, no gap.
  m.groups_per_token = 2;
  m.experts_per_token = 4;
  EXPECT_EQ(closest_routing_gap(m, logits, {}), INFINITY);
}

TEST(MoeRouting, ReportSortsEachTokensExpertsAndHandsOutRanges) {
  MoeConfig m;
  m.num_experts = 4;
  m.num_groups = 1;
  m.groups_per_token = 1;
  m.experts_per_token = 2;
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, -1.0f, 3.0f, 0.0f, 0.0f, 1.0f};
  const MoeRouting r = route_experts(m, logits, 2, {});
  MoeRoutingReport report;
  for (int t = 0; t < 2; ++t)
    report.add_token(m, std::span(logits).subspan(size_t(t * 4), 4), {}, &r.experts[size_t(t * 2)]);
  EXPECT_EQ(report.experts, (std::vector<int32_t>{1, 2, 0, 3}));  // token 1 chose 0 then 3
  ASSERT_EQ(report.gaps.size(), 2u);
  SequenceResult second;
  report.give(1, 1, second);
  EXPECT_EQ(second.routed_experts, (std::vector<int32_t>{0, 3}));
  ASSERT_EQ(second.routing_gaps.size(), 1u);
  EXPECT_EQ(second.routing_gaps[0], report.gaps[1]);
}

}  // namespace
}  // namespace dllm
