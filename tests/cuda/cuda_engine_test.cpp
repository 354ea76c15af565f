// The engine core on the GPU: many requests of mixed strategies batched into one forward against
// the same requests alone (GPU and CPU) — the embedded models and LLaDA2.x — preemption on a small
// pool, and the pool draining back to empty. cuBLAS picks its GEMM kernels by row count, so a
// batched row may differ from the solo row in its last bits: ids must match, or part from the solo
// run's (and the GPU's from the CPU's) at a near-tie shown in the reference's own numbers
// (support/decision_trace.h).
#include <gtest/gtest.h>

#include <cstdio>

#include "support/engine_runs.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

struct GpuCase {
  const char* model;
  std::vector<std::string> strategies;
  int requests;
};

// Runs `cases` on the GPU alone, on the CPU alone and on the GPU together in one engine: every
// request finishes once, its ids match the GPU solo run's and those the CPU's, or part from them at
// a shown near-tie; the requests shared forwards and the pool drains.
void expect_batched_tracks_solo_and_cpu(const Model& model, const std::string& name,
                                        const std::vector<test::EngineCase>& cases) {
  auto gpu = make_cuda_backend(model);
  auto cpu = make_cpu_backend(model);
  const auto gpu_alone = test::run_alone(model, *gpu, cases);
  const auto cpu_alone = test::run_alone(model, *cpu, cases);
  EngineCore core(model, *gpu);
  const auto together = test::run_together(core, cases);
  int same_as_solo = 0, same_as_cpu = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(together[i].finishes, 1) << i;
    EXPECT_EQ(together[i].error, "") << i;
    const std::string what =
        name + " request " + std::to_string(i) + " (" + cases[i].params.strategy + ")";
    same_as_solo += test::expect_same_or_near_tie(what + " batched vs GPU solo", together[i].ids,
                                                  together[i].trace, gpu_alone[i].ids,
                                                  gpu_alone[i].trace, cases[i].params);
    same_as_cpu += test::expect_same_or_near_tie(what + " GPU solo vs CPU solo", gpu_alone[i].ids,
                                                 gpu_alone[i].trace, cpu_alone[i].ids,
                                                 cpu_alone[i].trace, cases[i].params);
  }
  const int n = static_cast<int>(cases.size());
  std::printf("  %s: %d of %d batched = GPU solo, %d of %d GPU solo = CPU solo\n", name.c_str(),
              same_as_solo, n, same_as_cpu, n);
  EXPECT_GT(core.counters().sequences_in_steps, 2 * core.counters().steps);
  EXPECT_EQ(core.kv_pool().used_pages(), 0);
}

class CudaEngine : public ::testing::TestWithParam<GpuCase> {};

TEST_P(CudaEngine, BatchedRequestsTrackSoloAndCpu) {
  const GpuCase c = GetParam();
  auto model = Model::load(test::models_dir() / c.model);
  expect_batched_tracks_solo_and_cpu(*model, c.model,
                                     test::mixed_cases(*model, c.strategies, c.requests, 12));
}

// LLaDA2.x's MoE layers batched: the routed and shared experts' grouped GEMMs are batch
// invariant; the router's cuBLAS GEMM may move a near-tie.
TEST(CudaEngineLlada2, BatchedRequestsTrackSoloAndCpu) {
  auto model = Model::load(test::model_fixture("llada2-tiny"));
  expect_batched_tracks_solo_and_cpu(*model, "llada2-tiny", test::llada2_cases(*model));
}

INSTANTIATE_TEST_SUITE_P(
    EmbeddedModels, CudaEngine,
    ::testing::Values(GpuCase{"tiny-block", {"block", "s2d2", "ar"}, 24},
                      GpuCase{"tiny-full", {"full", "d2cache", "fastdllm", "dllmcache"}, 12},
                      GpuCase{"tiny-causal", {"wedlm", "ar"}, 16}),
    [](const auto& info) {
      std::string s = info.param.model;
      for (char& ch : s)
        if (ch == '-') ch = '_';
      return s;
    });

TEST(CudaEngineMemory, PreemptionOnASmallPoolFinishesEverything) {
  auto model = Model::load(test::models_dir() / "tiny-block");
  auto gpu = make_cuda_backend(*model);
  gpu->create_kv_pool(24, 16);
  const auto cases = test::mixed_cases(*model, {"block", "s2d2", "ar"}, 16, 0);
  EngineCore core(*model, *gpu);
  const auto together = test::run_together(core, cases);
  int64_t preempted = 0;
  for (const auto& o : together) {
    EXPECT_EQ(o.finishes, 1);
    EXPECT_EQ(o.error, "");
    EXPECT_FALSE(o.ids.empty());
    preempted += o.preemptions;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(core.kv_pool().used_pages(), 0);
}

}  // namespace
}  // namespace dllm
