// WeDLM streaming decoding against tools/reference_wedlm.py (an independent PyTorch
// implementation of the official engine's step loop, method-specs §3.2, run with transformers on
// the tiny wedlm fixtures; each reference step is a cache-free causal forward over the committed
// sequence plus the reordered window): the canvas after every forward, the generated ids, the
// finish reason, the number of forwards and the p_cache metric.
#include <gtest/gtest.h>

#include <limits>

#include "engine/engine_core.h"
#include "io/json_file.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

DecodeParams wedlm_params_from(const nlohmann::json& p) {
  DecodeParams d;
  d.strategy = p["strategy"];
  d.max_tokens = p["max_tokens"];
  d.window = p["window"].get<int32_t>();
  d.entropy_threshold = p["entropy_threshold"].is_null()
                            ? -std::numeric_limits<float>::infinity()  // none
                            : p["entropy_threshold"].get<float>();
  d.pos_penalty = p["pos_penalty"].get<float>();
  d.sampler.temperature = p["temperature"];
  d.sampler.top_k = p["top_k"];
  d.sampler.top_p = p["top_p"];
  d.seed = p["seed"];
  return d;
}

class WedlmTrajectory : public ::testing::TestWithParam<std::string> {};

// Padded (2W queries per step, the default) and unpadded windows must both match the reference.
TEST_P(WedlmTrajectory, MatchesReferenceAfterEveryForward) {
  const auto fx = read_json_file(test::fixtures_dir() / "trajectories" / (GetParam() + ".json"));
  auto model = Model::load(test::model_fixture(fx["model"]));
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  ASSERT_GE(fx["cases"].size(), 20u);
  for (const bool pad : {true, false}) {
    for (const auto& c : fx["cases"]) {
      SCOPED_TRACE(c["name"].get<std::string>() + (pad ? " (padded)" : " (unpadded)"));
      GenerationRequest req;
      req.prompt = c["prompt"].get<std::vector<int32_t>>();
      DecodeParams d = wedlm_params_from(c["params"]);
      d.pad_window = pad;
      req.params = resolve_decode_params(model->config(), d, int64_t(req.prompt.size()));
      req.stop_ids = c["params"]["stop_ids"].get<std::vector<int64_t>>();
      std::vector<std::vector<int32_t>> canvases;
      std::vector<int32_t> streamed;
      const auto r = engine.generate(
          req,
          [&](std::span<const int32_t> ids) {
            streamed.insert(streamed.end(), ids.begin(), ids.end());
          },
          [&](const Decoder& dec, auto) { canvases.push_back(dec.canvas()); });
      const auto& e = c["expected"];
      EXPECT_EQ(r.ids, e["ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(streamed, r.ids) << "streamed tokens must equal the result";
      EXPECT_EQ(r.finish_reason, e["finish_reason"]);
      EXPECT_EQ(r.stats.forwards, e["forwards"].get<int64_t>());
      ASSERT_EQ(r.stats.decoder_metrics.size(), 3u);
      EXPECT_EQ(r.stats.decoder_metrics[0].name, "p_cache");
      EXPECT_NEAR(r.stats.decoder_metrics[0].value, e["p_cache"].get<double>(), 1e-12);
      EXPECT_EQ(r.stats.decoder_metrics[2].value, e["window_tokens"].get<double>());
      const auto want = e["canvases"].get<std::vector<std::vector<int32_t>>>();
      ASSERT_EQ(canvases.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(canvases[i], want[i]) << "after forward " << i + 1;
    }
  }
}

auto test_name = [](const auto& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
};

INSTANTIATE_TEST_SUITE_P(WedlmFamilies, WedlmTrajectory,
                         ::testing::Values("wedlm-qwen3-tiny", "wedlm-qwen25-tiny"), test_name);

}  // namespace
}  // namespace dllm
