// The CUDA MoE router (kernels.h moe_route) against the CPU reference (backend/moe_routing.h) on
// fresh random logits of the LLaDA2.0-mini shape (256 experts, 8 groups, top 4 groups, top 8) and
// smaller ones, with exact ties planted: the same experts, in the same order, except where the
// reference's decision is a near-tie that one ulp of the sigmoid can flip; weights to 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/cuda/kernels.h"
#include "backend/moe_routing.h"
#include "cuda_test_util.h"

namespace dllm {
namespace {

// Whether token t's routing has a near-tie (gap below `eps`) between two biased scores — the only
// place CPU and GPU may differ (expf vs std::exp in the last bit).
bool near_tie(const std::vector<float>& logits, const std::vector<float>& bias, int experts, int t,
              float eps) {
  std::vector<float> sr(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e)
    sr[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[size_t(t * experts + e)])) + bias[size_t(e)];
  std::sort(sr.begin(), sr.end());
  for (size_t i = 1; i < sr.size(); ++i)
    if (sr[i] != sr[i - 1] && sr[i] - sr[i - 1] < eps) return true;
  return false;
}

TEST(CudaMoeRouter, MatchesTheCpuReference) {
  struct Shape {
    int experts, groups, keep, k;
  };
  for (const Shape s : {Shape{256, 8, 4, 8}, Shape{16, 4, 2, 4}, Shape{64, 1, 1, 6}}) {
    SCOPED_TRACE(s.experts);
    std::mt19937 rng(s.experts + s.k);
    const int n = 333;
    auto logits = test::random_floats(size_t(n * s.experts), rng, 2.0f);
    auto bias = test::random_floats(size_t(s.experts), rng, 0.1f);
    for (int t = 0; t < n; t += 3)  // exact ties inside a token
      for (int j = 0; j < s.experts / 4; ++j)
        logits[size_t(t * s.experts) + rng() % s.experts] =
            logits[size_t(t * s.experts) + rng() % s.experts];
    for (int e = 1; e < s.experts; e += 5) bias[size_t(e)] = bias[size_t(e - 1)];
    MoeConfig m;
    m.num_experts = s.experts;
    m.num_groups = s.groups;
    m.groups_per_token = s.keep;
    m.experts_per_token = s.k;
    m.routed_scaling_factor = 2.5;
    const MoeRouting ref = route_experts(m, logits, n, bias);

    auto d_logits = test::to_device(logits);
    auto d_bias = test::to_device(bias);
    cuda::DeviceBuffer<int32_t> d_experts(size_t(n * s.k), "experts");
    cuda::DeviceBuffer<float> d_weights(size_t(n * s.k), "weights");
    cuda::MoeRouteParams p;
    p.logits = d_logits.get();
    p.expert_bias = d_bias.get();
    p.experts_out = d_experts.get();
    p.weights_out = d_weights.get();
    p.n = n;
    p.experts = s.experts;
    p.groups = s.groups;
    p.groups_per_token = s.keep;
    p.top_k = s.k;
    p.scaling = 2.5f;
    cuda::moe_route(p, nullptr);
    const auto experts = test::to_host(d_experts);
    const auto weights = test::to_host(d_weights);
    int differing = 0;
    for (int t = 0; t < n; ++t) {
      const auto begin = size_t(t * s.k);
      const bool same = std::equal(experts.begin() + begin, experts.begin() + begin + s.k,
                                   ref.experts.begin() + begin);
      if (!same) {
        ++differing;
        EXPECT_TRUE(near_tie(logits, bias, s.experts, t, 1e-6f)) << "token " << t;
        continue;
      }
      for (int j = 0; j < s.k; ++j)
        EXPECT_NEAR(weights[begin + j], ref.weights[begin + j], 1e-5f) << "token " << t;
    }
    EXPECT_LE(differing, n / 50) << "differences must be rare near-ties";
  }
}

TEST(CudaMoeRouter, UnsupportedShapeIsAnError) {
  cuda::MoeRouteParams p;
  p.experts = 1024;
  p.top_k = 8;
  EXPECT_THROW(cuda::moe_route(p, nullptr), std::exception);
}

}  // namespace
}  // namespace dllm
