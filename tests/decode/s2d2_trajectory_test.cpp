// S2D2 trajectories against tools/reference_s2d2.py (an independent PyTorch implementation of the
// algorithm, method-specs §5) on the tiny SDAR and Fast-dLLM v2 fixtures, and against
// tools/reference_llada2_methods.py (that loop over LLaDA2.0 block diffusion, and S2D2 over
// LLaDA2.1 token editing as phymhan/S2D2 LLaDA2/generate_utils.py runs it, with its own LLaDA2
// forward) on the llada2-tiny fixture: every policy and estimator, greedy drafting and seeded
// sampling. Checked: the canvas after every forward, the ids, the finish reason, the forwards,
// the verify / accept / reject counts and, with token editing, the edits.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine_core.h"
#include "io/json_file.h"
#include "support/s2d2_fixture_params.h"
#include "support/test_paths.h"
#include "support/unverified_s2d2.h"

namespace dllm {
namespace {

class S2d2Trajectory : public ::testing::TestWithParam<std::string> {};

TEST_P(S2d2Trajectory, MatchesReferenceAfterEveryForward) {
  const auto fx = read_json_file(test::fixtures_dir() / "trajectories" / (GetParam() + ".json"));
  auto model = Model::load(test::model_fixture(fx["model"]));
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  ASSERT_GE(fx["cases"].size(), 15u);
  int64_t verified = 0, rejected = 0, edits = 0;
  for (const auto& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    GenerationRequest req;
    req.prompt = c["prompt"].get<std::vector<int32_t>>();
    req.params = resolve_decode_params(model->config(), test::s2d2_params_from(c["params"]),
                                       int64_t(req.prompt.size()));
    req.stop_ids = c["params"]["stop_ids"].get<std::vector<int64_t>>();
    std::vector<std::vector<int32_t>> canvases;
    const auto r =
        engine.generate(req, {}, [&](const Decoder& d, auto) { canvases.push_back(d.canvas()); });
    const auto& e = c["expected"];
    EXPECT_EQ(r.ids, e["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(r.finish_reason, e["finish_reason"]);
    EXPECT_EQ(r.stats.forwards, e["forwards"].get<int64_t>());
    ASSERT_TRUE(r.stats.speculative);
    EXPECT_EQ(r.stats.speculation.verify_calls, e["verify_calls"].get<int64_t>());
    EXPECT_EQ(r.stats.speculation.accepted, e["accepted"].get<int64_t>());
    EXPECT_EQ(r.stats.speculation.rejected, e["rejected"].get<int64_t>());
    verified += r.stats.speculation.verify_calls;
    rejected += r.stats.speculation.rejected;
    if (e.contains("edits")) {
      const auto& m = r.stats.decoder_metrics;
      const auto it =
          std::find_if(m.begin(), m.end(), [](const auto& x) { return x.name == "edits"; });
      ASSERT_NE(it, m.end());
      EXPECT_EQ(int64_t(it->value), e["edits"].get<int64_t>());
      edits += int64_t(it->value);
    }
    const auto want = e["canvases"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(canvases.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(canvases[i], want[i]) << "after forward " << i + 1;
  }
  // The fixture exercises verification and residual resampling, not only the fallback.
  EXPECT_GT(verified, 0);
  EXPECT_GT(rejected, 0);
  if (GetParam().ends_with("-edit")) {
    EXPECT_GT(edits, 0);
  }
}

std::string resolve_error(const std::string& fixture, const DecodeParams& d) {
  auto model = Model::load(test::model_fixture(fixture));
  try {
    resolve_decode_params(model->config(), d, 5);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(S2d2Resolve, DefaultsAndFamilyChecks) {
  auto sdar = Model::load(test::model_fixture("sdar-tiny"));
  DecodeParams d;
  d.strategy = "s2d2";
  const DecodeParams r = resolve_decode_params(sdar->config(), d, 5);
  EXPECT_FLOAT_EQ(r.threshold, 0.85f);  // method-specs §5.1: SDAR base rule tau = 0.85
  EXPECT_EQ(r.remasking, "low_confidence_dynamic");
  EXPECT_EQ(r.s2d2.policy, "span");
  EXPECT_EQ(r.s2d2.span_min, 1);
  EXPECT_EQ(r.s2d2.estimator, "hard-margin");
  DecodeParams v = d;
  v.s2d2.cache_ver = true;
  EXPECT_NE(resolve_error("fast-dllm-v2-tiny", v).find("--cache-ver"), std::string::npos);
  EXPECT_EQ(resolve_error("sdar-tiny", v), "");
  EXPECT_NE(resolve_error("llada-tiny", d).find("--strategy 's2d2'"), std::string::npos);
  // LLaDA2.x: S2D2 over LLaDA2.0 block diffusion, with that decoder's defaults (model-specs
  // §6.5): blocks of 32, steps = min(32, max_tokens), threshold 0.95 on the filtered probability.
  auto llada2 = Model::load(test::model_fixture("llada2-tiny"));
  DecodeParams l = d;
  l.max_tokens = 20;
  const DecodeParams lr = resolve_decode_params(llada2->config(), l, 5);
  EXPECT_EQ(lr.block_length, 32);
  EXPECT_EQ(lr.steps, 20);
  EXPECT_FLOAT_EQ(lr.threshold, 0.95f);
  EXPECT_EQ(lr.confidence, ConfidenceKind::kFiltered);
  EXPECT_EQ(lr.s2d2.policy, "span");
  l.editing_threshold = 0.5f;
  EXPECT_NE(resolve_error("llada2-tiny", l).find("apply to --strategy s2d2 only with --edit-mode"),
            std::string::npos);
  l = d;
  l.sparse.method = SparseMethod::kMage;
  EXPECT_NE(resolve_error("llada2-tiny", l).find("--sparse mage applies to --strategy block"),
            std::string::npos);
  v = d;
  v.s2d2.estimator = "nope";
  EXPECT_NE(resolve_error("sdar-tiny", v).find("--acceptance-estimator"), std::string::npos);
}

// LLaDA2.x: S2D2 that never verifies (a span minimum above the block) is LLaDA2.0 block
// diffusion — the same ids, forwards and canvases as --strategy block (greedy, sampled, the
// HF-2.0 quirk; blocks of 32 and 8).
TEST(S2d2Llada2, WithoutVerificationIsBlockDiffusion) {
  auto model = Model::load(test::model_fixture("llada2-tiny"));
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 13; ++i) prompt.push_back((i * 53 + 7) % 289);
  int runs = 0;
  for (const int32_t block : {32, 8})
    for (const float temperature : {0.0f, 0.8f})
      for (const bool quirk : {false, true}) {
        SCOPED_TRACE("block " + std::to_string(block) + " T " + std::to_string(temperature) +
                     (quirk ? " quirk" : ""));
        DecodeParams d;
        d.max_tokens = 30;
        d.block_length = block;
        d.threshold = 0.3f;
        d.sampler.temperature = temperature;
        d.hf_sampling_quirk = quirk;
        d.seed = 17;
        const auto r = test::decode_plain_and_unverified_s2d2(engine, *model, prompt, d, "block");
        EXPECT_EQ(r.s2d2.ids, r.plain.ids);
        EXPECT_EQ(r.s2d2.stats.forwards, r.plain.stats.forwards);
        EXPECT_EQ(r.s2d2.stats.speculation.verify_calls, 0);
        EXPECT_EQ(r.s2d2_canvases, r.plain_canvases);
        runs += !r.plain.ids.empty();
      }
  EXPECT_EQ(runs, 8);
}

// Fixture files; the test names drop "-s2d2" (llada2-tiny-s2d2-edit -> llada2_tiny_edit).
INSTANTIATE_TEST_SUITE_P(Families, S2d2Trajectory,
                         ::testing::Values("sdar-tiny-s2d2", "fast-dllm-v2-tiny-s2d2",
                                           "llada2-tiny-s2d2", "llada2-tiny-s2d2-edit"),
                         [](const auto& info) {
                           std::string s = info.param;
                           s.erase(s.find("-s2d2"), 5);
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace dllm
