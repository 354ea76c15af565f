#include "backend/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

namespace dllm {

namespace {

// Indices of the k largest values, best first; equal values: lower index first.
std::vector<int32_t> top_k_indices(std::span<const float> values, int64_t k) {
  std::vector<int32_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return values[static_cast<size_t>(a)] > values[static_cast<size_t>(b)] ||
           (values[static_cast<size_t>(a)] == values[static_cast<size_t>(b)] && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// One token's scores and the groups it may draw from.
struct TokenScores {
  std::vector<float> score, biased;  // sigmoid(logits), + the expert bias
  std::vector<float> group_score;    // each group's two best biased scores
  std::vector<float> candidates;     // biased, -inf outside the kept groups
};

TokenScores score_token(const MoeConfig& moe, std::span<const float> logits,
                        std::span<const float> expert_bias) {
  const int64_t n = moe.num_experts, per_group = moe.experts_per_group();
  TokenScores t;
  t.score.resize(static_cast<size_t>(n));
  t.biased.resize(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    const float s = 1.0f / (1.0f + std::exp(-logits[static_cast<size_t>(e)]));
    t.score[static_cast<size_t>(e)] = s;
    t.biased[static_cast<size_t>(e)] =
        expert_bias.empty() ? s : s + expert_bias[static_cast<size_t>(e)];
  }
  t.group_score.resize(static_cast<size_t>(moe.num_groups));
  for (int64_t g = 0; g < moe.num_groups; ++g) {
    const auto best = top_k_indices(std::span(t.biased).subspan(static_cast<size_t>(g * per_group),
                                                                static_cast<size_t>(per_group)),
                                    2);
    t.group_score[static_cast<size_t>(g)] = t.biased[static_cast<size_t>(g * per_group + best[0])] +
                                            t.biased[static_cast<size_t>(g * per_group + best[1])];
  }
  // Experts outside the kept groups cannot be chosen (-inf in the reference).
  t.candidates.assign(static_cast<size_t>(n), -INFINITY);
  for (int32_t g : top_k_indices(t.group_score, moe.groups_per_token))
    std::copy_n(t.biased.begin() + g * per_group, per_group, t.candidates.begin() + g * per_group);
  return t;
}

// One token: fills `experts` / `weights` (k entries each).
void route_token(const MoeConfig& moe, std::span<const float> logits,
                 std::span<const float> expert_bias, int32_t* experts, float* weights) {
  const TokenScores t = score_token(moe, logits, expert_bias);
  const auto chosen = top_k_indices(t.candidates, moe.experts_per_token);
  float total = 0.0f;
  for (int32_t e : chosen) total += t.score[static_cast<size_t>(e)];
  const bool normalise = moe.experts_per_token > 1;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const float s = t.score[static_cast<size_t>(chosen[i])];
    experts[i] = chosen[i];
    weights[i] =
        (normalise ? s / (total + 1e-20f) : s) * static_cast<float>(moe.routed_scaling_factor);
  }
}

// |a - b| relative to the larger magnitude.
double relative_gap(float a, float b) {
  return std::abs(double(a) - double(b)) /
         std::max({std::abs(double(a)), std::abs(double(b)), 1e-30});
}

// The gap at the cut between the k best of `values` and the rest (+inf without a rest).
double cut_gap(std::vector<float> values, int64_t k) {
  std::erase_if(values, [](float v) { return v == -INFINITY; });
  if (k <= 0 || k >= static_cast<int64_t>(values.size())) return INFINITY;
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<>());
  const float kth = values[static_cast<size_t>(k - 1)];
  const float next = *std::max_element(values.begin() + k, values.end());
  return relative_gap(kth, next);
}

}  // namespace

MoeRouting route_experts(const MoeConfig& moe, std::span<const float> router_logits, int64_t tokens,
                         std::span<const float> expert_bias) {
  MoeRouting r;
  const int64_t k = moe.experts_per_token;
  r.experts_per_token = k;
  r.experts.resize(static_cast<size_t>(tokens * k));
  r.weights.resize(r.experts.size());
  for (int64_t t = 0; t < tokens; ++t)
    route_token(moe,
                router_logits.subspan(static_cast<size_t>(t * moe.num_experts),
                                      static_cast<size_t>(moe.num_experts)),
                expert_bias, &r.experts[static_cast<size_t>(t * k)],
                &r.weights[static_cast<size_t>(t * k)]);
  return r;
}

double closest_routing_gap(const MoeConfig& moe, std::span<const float> logits,
                           std::span<const float> expert_bias) {
  const TokenScores t = score_token(moe, logits, expert_bias);
  return std::min(cut_gap(t.group_score, moe.groups_per_token),
                  cut_gap(t.candidates, moe.experts_per_token));
}

void MoeRoutingReport::add_token(const MoeConfig& moe, std::span<const float> logits,
                                 std::span<const float> expert_bias, const int32_t* chosen) {
  const size_t at = experts.size();
  experts.insert(experts.end(), chosen, chosen + moe.experts_per_token);
  std::sort(experts.begin() + static_cast<std::ptrdiff_t>(at), experts.end());
  gaps.push_back(closest_routing_gap(moe, logits, expert_bias));
}

void MoeRoutingReport::give(int64_t first, int64_t count, SequenceResult& result) const {
  if (gaps.empty()) return;
  const size_t k = experts.size() / gaps.size();
  const auto from = static_cast<size_t>(first), to = static_cast<size_t>(first + count);
  result.routed_experts.insert(result.routed_experts.end(), experts.begin() + from * k,
                               experts.begin() + to * k);
  result.routing_gaps.insert(result.routing_gaps.end(), gaps.begin() + from, gaps.begin() + to);
}

}  // namespace dllm
