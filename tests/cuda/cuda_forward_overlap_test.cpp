// A big plain batch runs as two halves on the CUDA backend's two forward lanes at once
// (src/backend/cuda/forward_lane.h). Each half runs the GEMM shapes of a forward of that half
// alone, so the split batch must give the bits of its halves run one after the other on a
// backend that never splits: directly, when a graph is captured, and when it is replayed.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cuda/cuda_backend.h"
#include "support/tensor_parallel_forwards.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

// A backend whose batches of at least `rows` rows split over its lanes ("0": never).
std::unique_ptr<cuda_backend::CudaBackend> backend_splitting_at(const Model& model,
                                                                const char* rows) {
  setenv("DLLM_FORWARD_OVERLAP_ROWS", rows, 1);
  auto backend = std::make_unique<cuda_backend::CudaBackend>(model, 0);
  unsetenv("DLLM_FORWARD_OVERLAP_ROWS");
  return backend;
}

// Six prompts prefilled into their own caches in one forward, then a block over every cache
// three times (run directly, captured, replayed); every logit in order. The first three
// sequences hold half the rows, where the backend cuts. `in_turn`: each forward runs as its two
// halves one after the other instead.
std::vector<float> prefills_and_blocks(Backend& backend, bool in_turn) {
  const std::vector<int> lengths = {20, 45, 30, 30, 45, 20};
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<SequenceForward> fills, blocks;
  for (size_t i = 0; i < lengths.size(); ++i) {
    caches.push_back(backend.create_cache(64));
    std::vector<int32_t> prompt(static_cast<size_t>(lengths[i]));
    for (size_t t = 0; t < prompt.size(); ++t)
      prompt[t] = static_cast<int32_t>((t * 37 + i * 11 + 3) % 290);
    fills.push_back(test::logit_rows(prompt, 0));
    fills.back().cache = caches.back().get();
    fills.back().write = CacheWrite::kAppend;
    blocks.push_back(test::logit_rows({12, 290, 290, 64}, lengths[i]));
    blocks.back().cache = caches.back().get();
  }
  std::vector<float> out;
  auto run = [&](std::span<const SequenceForward> batch) {
    for (const SequenceResult& r : backend.forward(batch))
      out.insert(out.end(), r.logits.begin(), r.logits.end());
  };
  auto run_batch = [&](std::span<const SequenceForward> batch) {
    if (!in_turn) return run(batch);
    run(batch.first(3));
    run(batch.subspan(3));
  };
  run_batch(fills);
  for (int rep = 0; rep < 3; ++rep) run_batch(blocks);
  return out;
}

TEST(CudaForwardOverlap, HalvesOnTwoLanesGiveTheBitsOfHalvesInTurn) {
  // SDAR (the embedded model) and LLaDA2.x (MoE: its routing and expert buffers are per lane).
  for (const auto& dir : {test::models_dir() / "tiny-block", test::model_fixture("llada2-tiny")}) {
    SCOPED_TRACE(dir.string());
    const auto model = Model::load(dir);
    auto split = backend_splitting_at(*model, "16");
    auto whole = backend_splitting_at(*model, "0");
    const std::vector<float> got = prefills_and_blocks(*split, false);
    EXPECT_EQ(split->split_forwards(), 4) << "the prefill and the three blocks split";
    const std::vector<float> want = prefills_and_blocks(*whole, true);
    EXPECT_EQ(whole->split_forwards(), 0);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(got, want);
  }
}

TEST(CudaForwardOverlap, SmallOrMethodBatchesRunWhole) {
  const auto model = Model::load(test::models_dir() / "tiny-block");
  auto backend = backend_splitting_at(*model, "64");
  auto a = backend->create_cache(64), b = backend->create_cache(64);
  std::vector<SequenceForward> small = {test::logit_rows({1, 2, 3, 4}, 0),
                                        test::logit_rows({5, 6, 7, 8}, 0)};
  small[0].cache = a.get();
  small[1].cache = b.get();
  backend->forward(small);
  EXPECT_EQ(backend->split_forwards(), 0) << "8 rows < 64";
  std::vector<int32_t> long_prompt(40, 7);
  std::vector<SequenceForward> rollout = {test::logit_rows(long_prompt, 0),
                                          test::logit_rows(long_prompt, 0)};
  rollout[0].cache = a.get();
  rollout[1].cache = b.get();
  rollout[1].rule = AttentionRule::bidirectional();
  rollout[1].want_attention_rows = true;  // d2Cache's rows: method scratch of lane 0
  backend->forward(rollout);
  EXPECT_EQ(backend->split_forwards(), 0) << "a sequence wants attention rows";
  rollout[1].rule = AttentionRule::block_causal(4);
  rollout[1].want_attention_rows = false;
  backend->forward(rollout);
  EXPECT_EQ(backend->split_forwards(), 1) << "80 plain rows >= 64";
}

}  // namespace
}  // namespace dllm
