// Tensor parallel on the GPU (issue 27): the NCCL group behind the Backend contract. A group of
// one runs every piece of the path (the coordinator's cache bookkeeping, the rank thread, the
// partial-sum hook, NCCL's all-reduce inside captured CUDA graphs) and must give the plain
// backend's bits; groups over several GPUs track the CPU (they need that many GPUs).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <numeric>

#include "backend/tensor_parallel_backend.h"
#include "engine/engine_core.h"
#include "support/engine_runs.h"
#include "support/rel_error.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

SequenceForward rows_at(const std::vector<int32_t>& ids, int32_t first_position) {
  SequenceForward f;
  f.tokens = ids;
  f.positions.resize(ids.size());
  std::iota(f.positions.begin(), f.positions.end(), first_position);
  f.rule = AttentionRule::block_causal(4);
  f.want_logits = true;
  f.output_rows.resize(ids.size());
  std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
  return f;
}

// A prompt, a second sequence sharing its page and rewriting one slot (a page copy), then the
// same block over both caches three times (run directly, captured, replayed): every logit.
std::vector<float> prefill_share_and_blocks(Backend& backend) {
  const std::vector<int32_t> prompt = {3, 99, 17, 250, 5, 8, 41, 7, 12, 290, 64, 33, 2, 81, 9, 14};
  auto a = backend.create_cache(32);
  SequenceForward fill = rows_at(prompt, 0);
  fill.cache = a.get();
  fill.write = CacheWrite::kAppend;
  std::vector<float> out = backend.forward(std::span(&fill, 1))[0].logits;
  auto b = std::make_unique<KvCache>(backend.kv_pool());
  const int32_t page = a->pages()[0];
  backend.kv_pool().retain(page);
  b->adopt_prefix(std::span(&page, 1));
  SequenceForward rewrite = rows_at({77}, 5);
  rewrite.cache = b.get();
  rewrite.write = CacheWrite::kAtSlots;
  rewrite.write_slots = {5};
  backend.forward(std::span(&rewrite, 1));
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<SequenceForward> blocks = {rows_at({12, 290, 290, 64}, 16),
                                           rows_at({12, 290, 290, 64}, 16)};
    blocks[0].cache = a.get();
    blocks[1].cache = b.get();
    for (const SequenceResult& r : backend.forward(blocks))
      out.insert(out.end(), r.logits.begin(), r.logits.end());
  }
  return out;
}

TEST(CudaTensorParallel, GroupOfOneGivesThePlainBackendsBits) {
  // SDAR (the embedded model) and LLaDA2.x (MoE: shared expert then routed experts into the
  // rank's partial, fused QKV, partial rotary; the random fixture).
  for (const auto& dir : {test::models_dir() / "tiny-block", test::model_fixture("llada2-tiny")}) {
    SCOPED_TRACE(dir.string());
    const auto model = Model::load(dir);
    const auto plain = prefill_share_and_blocks(*make_cuda_backend(*model));
    const auto group = prefill_share_and_blocks(*make_tensor_parallel_backend(*model, "cuda", 1));
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
    const auto cpu = prefill_share_and_blocks(*make_cpu_backend(*model));
    for (int world : {2, 4}) {
      if (world > gpus) break;
      const auto group =
          prefill_share_and_blocks(*make_tensor_parallel_backend(*model, "cuda", world));
      const double err = test::rel_error(group, cpu);
      std::printf("  %s TP %d: relative error vs the CPU %.2e\n", dir.filename().c_str(), world,
                  err);
      EXPECT_LT(err, 1e-2) << dir << " TP " << world;
    }
  }
}

}  // namespace
}  // namespace dllm
