#include "backend/moe_routing.h"

#include <algorithm>
#include <cmath>
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

// One token: fills `experts` / `weights` (k entries each).
void route_token(const MoeConfig& moe, std::span<const float> logits,
                 std::span<const float> expert_bias, int32_t* experts, float* weights) {
  const int64_t n = moe.num_experts, per_group = moe.experts_per_group();
  std::vector<float> score(static_cast<size_t>(n)), biased(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    const float s = 1.0f / (1.0f + std::exp(-logits[static_cast<size_t>(e)]));
    score[static_cast<size_t>(e)] = s;
    biased[static_cast<size_t>(e)] =
        expert_bias.empty() ? s : s + expert_bias[static_cast<size_t>(e)];
  }
  // Group scores: the sum of each group's two best biased scores.
  std::vector<float> group_score(static_cast<size_t>(moe.num_groups));
  for (int64_t g = 0; g < moe.num_groups; ++g) {
    const auto best = top_k_indices(std::span(biased).subspan(static_cast<size_t>(g * per_group),
                                                              static_cast<size_t>(per_group)),
                                    2);
    group_score[static_cast<size_t>(g)] = biased[static_cast<size_t>(g * per_group + best[0])] +
                                          biased[static_cast<size_t>(g * per_group + best[1])];
  }
  // Experts outside the kept groups cannot be chosen (-inf in the reference).
  std::vector<float> candidates(static_cast<size_t>(n), -INFINITY);
  for (int32_t g : top_k_indices(group_score, moe.groups_per_token))
    std::copy_n(biased.begin() + g * per_group, per_group, candidates.begin() + g * per_group);
  const auto chosen = top_k_indices(candidates, moe.experts_per_token);
  float total = 0.0f;
  for (int32_t e : chosen) total += score[static_cast<size_t>(e)];
  const bool normalise = moe.experts_per_token > 1;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const float s = score[static_cast<size_t>(chosen[i])];
    experts[i] = chosen[i];
    weights[i] =
        (normalise ? s / (total + 1e-20f) : s) * static_cast<float>(moe.routed_scaling_factor);
  }
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

}  // namespace dllm
