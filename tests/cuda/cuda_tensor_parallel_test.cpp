// Tensor parallel on the GPU (issue 27): the NCCL group behind the Backend contract. A group of
// one runs every piece of the path (the coordinator's cache bookkeeping, the rank thread, the
// partial-sum hook, NCCL's all-reduce inside captured CUDA graphs) and must give the plain
// backend's bits; groups over several GPUs track the CPU (they need that many GPUs).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdio>

#include "backend/tensor_parallel_backend.h"
#include "engine/engine_core.h"
#include "support/engine_runs.h"
#include "support/rel_error.h"
#include "support/tensor_parallel_forwards.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

TEST(CudaTensorParallel, GroupOfOneGivesThePlainBackendsBits) {
  // SDAR (the embedded model) and LLaDA2.x (MoE: shared expert then routed experts into the
  // rank's partial, fused QKV, partial rotary; the random fixture).
  for (const auto& dir : {test::models_dir() / "tiny-block", test::model_fixture("llada2-tiny")}) {
    SCOPED_TRACE(dir.string());
    const auto model = Model::load(dir);
    const auto plain = test::prefill_share_and_blocks(*make_cuda_backend(*model));
    const auto group =
        test::prefill_share_and_blocks(*make_tensor_parallel_backend(*model, "cuda", 1));
    ASSERT_EQ(group.size(), plain.size());
    EXPECT_EQ(group, plain);
  }
}

TEST(CudaTensorParallel, GroupOfOneBatchesRequestsAsThePlainBackend) {
  const auto model = Model::load(test::models_dir() / "tiny-block");
  const auto cases = test::mixed_cases(*model, {"block", "s2d2", "ar", "block+mage"}, 12, 8);
  auto plain = make_cuda_backend(*model);
  EngineCore plain_core(*model, *plain);
  const auto expected = test::run_together(plain_core, cases);
  auto group = make_tensor_parallel_backend(*model, "cuda", 1);
  EngineCore core(*model, *group);
  const auto got = test::run_together(core, cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(got[i].error, "") << i;
    EXPECT_FALSE(got[i].ids.empty()) << i;
    EXPECT_EQ(got[i].ids, expected[i].ids) << "request " << i << " " << cases[i].params.strategy;
  }
  EXPECT_EQ(core.kv_pool().used_pages(), 0);
}

// Every group size the machine's GPUs allow (2, 4): the logits of the CPU's whole model within
// bf16 tolerance.
TEST(CudaTensorParallel, GroupsOverSeveralGpusTrackTheCpu) {
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs or more (" << gpus << " visible)";
  for (const auto& dir : {test::models_dir() / "tiny-block", test::model_fixture("llada2-tiny")}) {
    const auto model = Model::load(dir);
    const auto cpu = test::prefill_share_and_blocks(*make_cpu_backend(*model));
    for (int world : {2, 4}) {
      if (world > gpus) break;
      const auto group =
          test::prefill_share_and_blocks(*make_tensor_parallel_backend(*model, "cuda", world));
      const double err = test::rel_error(group, cpu);
      std::printf("  %s TP %d: relative error vs the CPU %.2e\n", dir.filename().c_str(), world,
                  err);
      EXPECT_LT(err, 1e-2) << dir << " TP " << world;
    }
  }
}

}  // namespace
}  // namespace dllm
