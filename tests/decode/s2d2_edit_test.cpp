// S2D2 over LLaDA2.1 token editing (--strategy s2d2 --edit-mode s|q, s2d2_edit_decoder.h) on the
// llada2-tiny fixture: a policy that never verifies makes it --strategy edit forward for forward,
// its defaults are the edit presets, and options that do not combine are errors naming them.
// Its trajectories against the reference are in s2d2_trajectory_test.cpp (llada2_tiny_edit).
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine_core.h"
#include "support/test_paths.h"
#include "support/unverified_s2d2.h"

namespace dllm {
namespace {

double metric(const GenerationResult& r, const std::string& name) {
  const auto& m = r.stats.decoder_metrics;
  const auto it = std::find_if(m.begin(), m.end(), [&](const auto& x) { return x.name == name; });
  return it == m.end() ? -1.0 : it->value;
}

// A span minimum above the block never verifies: the same ids, forwards, canvases and edits as
// --strategy edit (greedy, sampled, the HF-2.0 quirk; S and Q presets; blocks of 32 and 8).
TEST(S2d2Edit, WithoutVerificationIsTokenEditing) {
  auto model = Model::load(test::model_fixture("llada2-tiny"));
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 13; ++i) prompt.push_back((i * 53 + 7) % 289);
  int64_t edits = 0;
  for (const int32_t block : {32, 8})
    for (const float temperature : {0.0f, 0.8f})
      for (const bool quirk : {false, true}) {
        const std::string mode = quirk ? "q" : "s";
        SCOPED_TRACE("block " + std::to_string(block) + " T " + std::to_string(temperature) +
                     " mode " + mode + (quirk ? " quirk" : ""));
        DecodeParams d;
        d.max_tokens = 30;
        d.block_length = block;
        d.edit_mode = mode;
        d.threshold = 0.2f;
        d.editing_threshold = 0.05f;
        d.sampler.temperature = temperature;
        d.hf_sampling_quirk = quirk;
        d.seed = 17;
        const auto r = test::decode_plain_and_unverified_s2d2(engine, *model, prompt, d, "edit");
        EXPECT_FALSE(r.plain.ids.empty());
        EXPECT_EQ(r.s2d2.ids, r.plain.ids);
        EXPECT_EQ(r.s2d2.stats.forwards, r.plain.stats.forwards);
        EXPECT_EQ(r.s2d2.stats.speculation.verify_calls, 0);
        EXPECT_EQ(metric(r.s2d2, "edits"), metric(r.plain, "edits"));
        EXPECT_EQ(r.s2d2_canvases, r.plain_canvases);
        edits += int64_t(metric(r.plain, "edits"));
      }
  EXPECT_GT(edits, 0) << "the comparison must cover real edits";
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

TEST(S2d2Edit, DefaultsAreTheEditPresets) {
  auto model = Model::load(test::model_fixture("llada2-tiny"));
  DecodeParams d;
  d.strategy = "s2d2";
  d.edit_mode = "s";
  const DecodeParams s = resolve_decode_params(model->config(), d, 5);
  EXPECT_EQ(s.block_length, 32);
  EXPECT_EQ(s.steps, 0);
  EXPECT_FLOAT_EQ(s.threshold, 0.5f);
  EXPECT_FLOAT_EQ(s.editing_threshold, 0.0f);
  EXPECT_EQ(s.max_post_steps, 16);
  EXPECT_EQ(s.s2d2.policy, "span");
  d.edit_mode = "q";
  const DecodeParams q = resolve_decode_params(model->config(), d, 5);
  EXPECT_FLOAT_EQ(q.threshold, 0.7f);
  EXPECT_FLOAT_EQ(q.editing_threshold, 0.5f);
  // Without --edit-mode the draft stays LLaDA2.0 block diffusion.
  d.edit_mode.clear();
  EXPECT_EQ(resolve_decode_params(model->config(), d, 5).steps, 32);
}

TEST(S2d2Edit, BadCombinationsNameTheOption) {
  DecodeParams d;
  d.strategy = "s2d2";
  d.edit_mode = "s";
  auto error_with = [&](auto change, const std::string& fixture = "llada2-tiny") {
    DecodeParams p = d;
    change(p);
    return resolve_error(fixture, p);
  };
  auto has = [](const std::string& error, const std::string& text) {
    return error.find(text) != std::string::npos;
  };
  EXPECT_TRUE(has(error_with([](DecodeParams& p) { p.edit_mode = "x"; }),
                  "--edit-mode 'x' (expected s or q)"));
  EXPECT_TRUE(has(error_with([](DecodeParams& p) { p.steps = 8; }),
                  "--steps does not apply to --strategy s2d2 with --edit-mode"));
  EXPECT_TRUE(has(error_with([](DecodeParams& p) { p.remasking = "low_confidence_dynamic"; }),
                  "--remasking does not apply to --strategy s2d2 with --edit-mode"));
  EXPECT_TRUE(has(error_with([](DecodeParams& p) { p.s2d2.cache_ver = true; }),
                  "--cache-ver / --draft-ver do not apply to --strategy s2d2 with --edit-mode"));
  EXPECT_TRUE(has(error_with([](DecodeParams& p) { p.s2d2.draft_ver = true; }),
                  "--cache-ver / --draft-ver do not apply to --strategy s2d2 with --edit-mode"));
  EXPECT_TRUE(has(error_with([](DecodeParams& p) { p.editing_threshold = 1.5f; }),
                  "--editing-threshold must be in [0, 1]"));
  EXPECT_TRUE(has(error_with([](DecodeParams& p) { p.sparse.method = SparseMethod::kMage; }),
                  "--sparse mage applies to --strategy block"));
  EXPECT_TRUE(has(error_with([](DecodeParams& p) { p.s2d2.policy = "nope"; }), "--verify-policy"));
  // The editing knobs without --edit-mode, and --edit-mode on a family that does not edit.
  EXPECT_TRUE(has(error_with([](DecodeParams& p) {
                    p.edit_mode.clear();
                    p.max_post_steps = 4;
                  }),
                  "--editing-threshold and --max-post-steps apply to --strategy s2d2 only with "
                  "--edit-mode s|q"));
  EXPECT_TRUE(has(error_with([](DecodeParams&) {}, "sdar-tiny"),
                  "apply to --strategy edit and --strategy s2d2 on LLaDA2.x checkpoints (LLaDA2.1 "
                  "token editing), not --strategy s2d2 on sdar"));
  EXPECT_EQ(error_with([](DecodeParams&) {}), "");
}

}  // namespace
}  // namespace dllm
