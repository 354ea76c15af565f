// dLLM-Cache (method-specs §6.3): refreshing everything every step is vanilla decoding; knob
// validation. Trajectory parity with tools/reference_d2cache.py is in trajectory_test.cpp.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

std::vector<std::vector<int32_t>> trajectory(EngineCore& engine, const Model& model,
                                             const std::vector<int32_t>& prompt, DecodeParams p) {
  GenerationRequest req;
  req.prompt = prompt;
  req.params = resolve_decode_params(model.config(), p, int64_t(prompt.size()));
  std::vector<std::vector<int32_t>> canvases;
  engine.generate(req, nullptr, [&](const Decoder& d, auto) { canvases.push_back(d.canvas()); });
  return canvases;
}

// K_p = K_r = 1 recomputes every layer of every row each step: vanilla LLaDA low-confidence
// decoding, one token per step.
TEST(DllmCache, RefreshEveryStepEqualsVanillaLlada) {
  auto model = Model::load(test::model_fixture("llada-tiny"));
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  const std::vector<int32_t> prompt = {40, 2, 8, 71, 9, 120};
  DecodeParams full;
  full.strategy = "full";
  full.max_tokens = 16;
  full.block_length = 8;
  DecodeParams dc = full;
  dc.strategy = "dllmcache";
  dc.dlc_kp = dc.dlc_kr = 1;
  const auto want = trajectory(engine, *model, prompt, full);
  ASSERT_EQ(want.size(), 16u);
  EXPECT_EQ(trajectory(engine, *model, prompt, dc), want);
  dc.dlc_kp = 8;
  dc.dlc_kr = 4;
  dc.dlc_rho = 0.0f;
  EXPECT_NE(trajectory(engine, *model, prompt, dc), want);
}

TEST(DllmCache, BadKnobsAreRefusedByName) {
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
  p.strategy = "dllmcache";
  p.max_tokens = 16;
  const DecodeParams r = resolve_decode_params(model->config(), p, 4);
  EXPECT_EQ(r.dlc_kp, 25);  // Dream GSM8K row of d2Cache's table
  EXPECT_EQ(r.dlc_kr, 2);
  DecodeParams q = p;
  q.dlc_kp = -1;
  expect_error(q, "--dlc-kp");
  q = p;
  q.dlc_kr = -3;
  expect_error(q, "--dlc-kr");
  q = p;
  q.dlc_rho = 2.0f;
  expect_error(q, "--dlc-rho");
  q = p;
  q.strategy = "full";
  q.dlc_kr = 3;
  expect_error(q, "--dlc-");
}

}  // namespace
}  // namespace dllm
