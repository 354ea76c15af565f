// Fast-dLLM v1 (method-specs §6.4): what each forward covers, and knob validation. Trajectory
// parity with tools/reference_d2cache.py is in trajectory_test.cpp.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/error.h"
#include "decode/fast_dllm_v1_decoder.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

// Per block: one full-canvas forward, then forwards of the block (dual) or the block and its
// suffix (prefix) only.
TEST(FastDllmV1, ForwardShapesPerCacheMode) {
  auto model = Model::load(test::model_fixture("llada-tiny"));
  auto backend = make_cpu_backend(*model);
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 8};
  for (const std::string mode : {"dual", "prefix"}) {
    DecodeParams p;
    p.strategy = "fastdllm";
    p.cache = mode;
    p.max_tokens = 16;
    p.block_length = 8;
    p = resolve_decode_params(model->config(), p, int64_t(prompt.size()));
    EXPECT_EQ(p.threshold, 0.9f);
    FastDllmV1Decoder dec(model->config(), p, prompt);
    auto cache = backend->create_cache(dec.cache_capacity());
    int full = 0, partial = 0;
    SequenceForward f;
    f.cache = cache.get();
    while (dec.plan(f)) {
      if (f.tokens.size() == 21u) {
        ++full;
        EXPECT_EQ(f.positions.front(), 0);
      } else {
        ++partial;
        const size_t start = f.positions.front();
        EXPECT_TRUE(start == 5u || start == 13u);
        EXPECT_EQ(f.tokens.size(), mode == "dual" ? 8u : 21u - start);
        EXPECT_EQ(f.write, CacheWrite::kAtSlots);
      }
      dec.observe(backend->forward(std::span(&f, 1))[0]);
      f = SequenceForward{};
      f.cache = cache.get();
    }
    EXPECT_EQ(full, 2) << mode;  // one per block
    EXPECT_GT(partial, 0) << mode;
    EXPECT_EQ(dec.canvas().size(), 16u);
    for (int32_t t : dec.canvas()) EXPECT_NE(t, model->config().mask_token_id);
  }
}

TEST(FastDllmV1, BadKnobsAreRefusedByName) {
  auto model = Model::load(test::model_fixture("dream-tiny"));
  auto expect_error = [&](DecodeParams p, const std::string& what) {
    try {
      resolve_decode_params(model->config(), p, 4);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  DecodeParams p;
  p.strategy = "fastdllm";
  p.max_tokens = 16;
  DecodeParams q = p;
  q.cache = "both";
  expect_error(q, "--cache");
  q = p;
  q.steps = 4;
  expect_error(q, "--steps");
  q = p;
  q.block_length = 5;
  expect_error(q, "--block-length");
  q = p;
  q.sampler.temperature = 0.5f;
  expect_error(q, "--temperature");
  q = p;
  q.strategy = "full";
  q.cache = "dual";
  expect_error(q, "--cache");
}

}  // namespace
}  // namespace dllm
