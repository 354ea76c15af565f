// `dllm bench`'s MoE floor counts the routed experts a step's rows touch
// (Backend::profiled_moe_experts_touched): on the CPU backend, alone and as tensor-parallel groups
// (split by feature every rank runs every touched expert; split by expert each rank counts its
// own), the count is the forward's distinct routed experts per MoE layer.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "backend/backend.h"
#include "backend/tensor_parallel_backend.h"
#include "model/model.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

struct ProfiledForward {
  SequenceResult result;
  std::optional<double> experts_touched;
};

// A profiled 40-token prefill with its routing reported.
ProfiledForward profiled_prefill(Backend& backend, const std::vector<int32_t>& tokens) {
  auto cache = backend.create_cache(64);
  SequenceForward f;
  f.cache = cache.get();
  f.tokens = tokens;
  f.positions.resize(tokens.size());
  std::iota(f.positions.begin(), f.positions.end(), 0);
  f.rule = AttentionRule::block_causal(8);
  f.write = CacheWrite::kAppend;
  f.want_routing = true;
  backend.set_profiling(true);
  ProfiledForward out{backend.forward(std::span(&f, 1))[0], std::nullopt};
  out.experts_touched = backend.profiled_moe_experts_touched();
  backend.set_profiling(false);
  return out;
}

// The distinct experts of each MoE layer's rows (routed_experts: layer-major, k per row), averaged.
double distinct_experts_per_layer(const SequenceResult& r, size_t rows, size_t k) {
  const size_t per_layer = rows * k, layers = r.routed_experts.size() / per_layer;
  double sum = 0;
  for (size_t l = 0; l < layers; ++l)
    sum += double(std::set<int32_t>(r.routed_experts.begin() + l * per_layer,
                                    r.routed_experts.begin() + (l + 1) * per_layer)
                      .size());
  return sum / double(layers);
}

TEST(MoeProfile, ExpertsTouchedAreTheForwardsDistinctRoutedExperts) {
  const auto model = Model::load(test::model_fixture("llada2-tiny"));
  const size_t k = static_cast<size_t>(model->config().moe.experts_per_token);
  std::mt19937 rng(8);
  std::vector<int32_t> tokens(40);
  for (int32_t& t : tokens) t = int32_t(rng() % 280);
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_cpu_backend(*model));
  for (const MoeSplit split : {MoeSplit::kExpertFeatures, MoeSplit::kExperts})
    backends.push_back(make_tensor_parallel_backend(*model, "cpu", 2, split));
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend->name());
    const ProfiledForward p = profiled_prefill(*backend, tokens);
    ASSERT_FALSE(p.result.routed_experts.empty());
    ASSERT_EQ(p.result.routed_experts.size() % (tokens.size() * k), 0u);
    ASSERT_TRUE(p.experts_touched.has_value());
    EXPECT_DOUBLE_EQ(*p.experts_touched, distinct_experts_per_layer(p.result, tokens.size(), k));
    EXPECT_FALSE(backend->profiled_moe_experts_touched().has_value()) << "cleared when turned off";
  }
}

}  // namespace
}  // namespace dllm
