// Decoder trajectories against independent PyTorch implementations of the reference loops, run
// with transformers on the tiny fixtures: tools/reference_decode.py (SDAR, Fast-dLLM v2, AR) and
// tools/reference_full_diffusion.py (LLaDA, Dream), tools/reference_d2cache.py (d2Cache on LLaDA
// and Dream), tools/reference_llada2.py (LLaDA2.0 block diffusion, LLaDA2.1 token editing).
// Checked: the canvas after every forward, the generated ids, the finish reason and the number of
// forwards.
#include <gtest/gtest.h>

#include "engine/engine_core.h"
#include "io/json_file.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

DecodeParams params_from(const nlohmann::json& p) {
  DecodeParams d;
  d.strategy = p["strategy"];
  d.max_tokens = p["max_tokens"];
  d.block_length = p["block_length"];
  d.steps = p["steps"];
  d.threshold = p["threshold"];
  d.remasking = p["remasking"];
  d.sub_block_length = p["sub_block_length"];
  d.confidence =
      p["confidence"] == "filtered" ? ConfidenceKind::kFiltered : ConfidenceKind::kTempered;
  d.sampler.temperature = p["temperature"];
  d.sampler.top_k = p["top_k"];
  d.sampler.top_p = p["top_p"];
  d.seed = p["seed"];
  // Full diffusion (tools/reference_full_diffusion.py).
  d.cfg_scale = p.value("cfg_scale", 0.0f);
  d.logits_eos_inf = p.value("logits_eos_inf", false);
  d.confidence_eos_eot_inf = p.value("confidence_eos_eot_inf", false);
  d.alg = p.value("alg", std::string());
  d.alg_temp = p.value("alg_temp", 0.0f);
  // d2Cache (tools/reference_d2cache.py).
  d.d2c_k = p.value("d2c_k", 32);
  d.d2c_sigma = p.value("d2c_sigma", 10.0f);
  d.d2c_p = p.value("d2c_p", 0.1f);
  d.d2c_inflate = p.value("d2c_inflate", 0);
  d.d2c_frozen_conf = p.value("d2c_frozen_conf", false);
  d.d2c_select_all = p.value("d2c_select_all", false);
  d.cache = p.value("cache", std::string());
  d.dlc_kp = p.value("dlc_kp", 0);
  d.dlc_kr = p.value("dlc_kr", 0);
  d.dlc_rho = p.value("dlc_rho", 0.25f);
  // LLaDA2.x (tools/reference_llada2.py).
  d.hf_sampling_quirk = p.value("hf_quirk", false);
  d.editing_threshold = p.value("editing_threshold", -1.0f);
  d.max_post_steps = d.strategy == "edit" ? p.value("max_post_steps", -1) : -1;
  return d;
}

class Trajectory : public ::testing::TestWithParam<std::string> {};

TEST_P(Trajectory, MatchesReferenceAfterEveryForward) {
  const auto fx = read_json_file(test::fixtures_dir() / "trajectories" / (GetParam() + ".json"));
  auto model = Model::load(test::model_fixture(fx["model"]));
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  ASSERT_GE(fx["cases"].size(), 10u);
  for (const auto& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    GenerationRequest req;
    req.prompt = c["prompt"].get<std::vector<int32_t>>();
    req.params = resolve_decode_params(model->config(), params_from(c["params"]),
                                       int64_t(req.prompt.size()));
    req.stop_ids = c["params"]["stop_ids"].get<std::vector<int64_t>>();
    std::vector<std::vector<int32_t>> canvases;
    std::vector<int32_t> streamed;
    const auto r = engine.generate(
        req,
        [&](std::span<const int32_t> ids) {
          streamed.insert(streamed.end(), ids.begin(), ids.end());
        },
        [&](const Decoder& d, auto) { canvases.push_back(d.canvas()); });
    const auto& e = c["expected"];
    EXPECT_EQ(r.ids, e["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(streamed, r.ids) << "streamed tokens must equal the result";
    EXPECT_EQ(r.finish_reason, e["finish_reason"]);
    EXPECT_EQ(r.stats.forwards, e["forwards"].get<int64_t>());
    const auto want = e["canvases"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(canvases.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(canvases[i], want[i]) << "after forward " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Trajectory,
                         ::testing::Values("sdar-tiny", "fast-dllm-v2-tiny", "llada-tiny",
                                           "dream-tiny", "llada-tiny-d2cache", "dream-tiny-d2cache",
                                           "llada2-tiny", "llada2-tiny-edit"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace dllm
