// LLaDA2.x through the serving engine on the tiny fixture (tools/reference_llada2.py): block
// diffusion and token editing (exact and with MAGE) and S2D2 requests (over block diffusion and
// over token editing) — greedy, sampled, with the HF-2.0 sampling quirk, S and Q modes, blocks
// of 32 and 8 — batched together give the ids each gives alone; the checkpoint's tokenizer and
// Ling role-format chat template are the ones the engine uses.
#include <gtest/gtest.h>

#include "support/engine_runs.h"
#include "support/test_paths.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace dllm {
namespace {

TEST(Llada2Engine, BatchedRequestsEqualRequestsAlone) {
  auto model = Model::load(test::model_fixture("llada2-tiny"));
  auto backend = make_cpu_backend(*model);
  const auto cases = test::llada2_cases(*model);
  const auto alone = test::run_alone(*model, *backend, cases);
  EngineCore core(*model, *backend);
  const auto together = test::run_together(core, cases);
  ASSERT_EQ(alone.size(), together.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + " " + cases[i].params.strategy + " " +
                 to_string(cases[i].params.sparse.method));
    EXPECT_EQ(together[i].finishes, 1);
    EXPECT_EQ(together[i].error, "");
    EXPECT_FALSE(alone[i].ids.empty());
    EXPECT_EQ(together[i].ids, alone[i].ids);
    EXPECT_EQ(together[i].finish_reason, alone[i].finish_reason);
    // The traced forwards' routing (SequenceRequest::trace_routing): each row's k experts and its
    // gap, the same in a batch as alone (a batch hands every sequence its own rows) — after the
    // prefill, which in a batch may start past a prompt prefix another request published.
    ASSERT_EQ(together[i].trace.size(), alone[i].trace.size());
    size_t routed = 0;
    for (size_t f = 1; f < alone[i].trace.size(); ++f) {
      const test::ForwardRecord &a = alone[i].trace[f], &t = together[i].trace[f];
      EXPECT_EQ(a.routed_experts.size(),
                a.routing_gaps.size() * size_t(model->config().moe.experts_per_token));
      EXPECT_EQ(t.routed_experts, a.routed_experts) << "forward " << f;
      EXPECT_EQ(t.routing_gaps, a.routing_gaps) << "forward " << f;
      routed += a.routing_gaps.size();
    }
    EXPECT_GT(routed, 0u);
  }
  EXPECT_GT(core.counters().sequences_in_steps, 2 * core.counters().steps)
      << "the requests must actually share forwards";
  EXPECT_EQ(core.kv_pool().used_pages(), 0);
}

TEST(Llada2Engine, FamilyDefaultsAndBadKnobs) {
  auto model = Model::load(test::model_fixture("llada2-tiny"));
  const ModelConfig& c = model->config();
  DecodeParams block = resolve_decode_params(c, {}, 5);
  EXPECT_EQ(block.strategy, "block");
  EXPECT_EQ(block.block_length, 32);
  EXPECT_EQ(block.steps, 32);
  EXPECT_FLOAT_EQ(block.threshold, 0.95f);
  EXPECT_EQ(block.confidence, ConfidenceKind::kFiltered);
  DecodeParams tempered;  // a user's --confidence is kept, not overridden by the family's
  tempered.confidence = ConfidenceKind::kTempered;
  EXPECT_EQ(resolve_decode_params(c, tempered, 5).confidence, ConfidenceKind::kTempered);
  EXPECT_TRUE(block.sampler.greedy());
  DecodeParams quirk;
  quirk.hf_sampling_quirk = true;
  EXPECT_FLOAT_EQ(resolve_decode_params(c, quirk, 5).sampler.temperature, 1.0f);
  DecodeParams few;
  few.max_tokens = 10;
  EXPECT_EQ(resolve_decode_params(c, few, 5).steps, 10) << "steps = min(steps, gen_length)";

  DecodeParams edit;
  edit.strategy = "edit";
  const DecodeParams s = resolve_decode_params(c, edit, 5);
  EXPECT_FLOAT_EQ(s.threshold, 0.5f);
  EXPECT_FLOAT_EQ(s.editing_threshold, 0.0f);
  EXPECT_EQ(s.max_post_steps, 16);
  edit.edit_mode = "q";
  const DecodeParams q = resolve_decode_params(c, edit, 5);
  EXPECT_FLOAT_EQ(q.threshold, 0.7f);
  EXPECT_FLOAT_EQ(q.editing_threshold, 0.5f);

  auto error_of = [&](DecodeParams p) {
    try {
      resolve_decode_params(c, p, 5);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  DecodeParams bad = edit;
  bad.edit_mode = "x";
  EXPECT_NE(error_of(bad).find("--edit-mode 'x' (expected s or q)"), std::string::npos);
  bad = edit;
  bad.steps = 4;
  EXPECT_NE(error_of(bad).find("--steps does not apply to --strategy edit"), std::string::npos);
  bad = {};
  bad.editing_threshold = 0.3f;
  EXPECT_NE(error_of(bad).find("apply to --strategy edit and --strategy s2d2 on LLaDA2.x "
                               "checkpoints (LLaDA2.1 token editing), not --strategy block"),
            std::string::npos);
  bad = {};
  bad.strategy = "full";
  EXPECT_NE(error_of(bad).find("available: block, edit, s2d2"), std::string::npos);
  bad = edit;
  bad.sparse.method = SparseMethod::kSparseD;
  EXPECT_NE(error_of(bad).find("--sparse sparsed needs a fixed number of steps"),
            std::string::npos);
  bad.sparse.method = SparseMethod::kMage;
  EXPECT_EQ(error_of(bad), "") << "MAGE runs with token editing";
  bad = {};
  bad.sparse.method = SparseMethod::kMage;
  bad.strategy = "s2d2";
  EXPECT_NE(error_of(bad).find("--sparse mage applies to --strategy block on SDAR, Fast-dLLM v2 "
                               "and LLaDA2.x checkpoints and to --strategy edit on LLaDA2.x (not "
                               "--strategy s2d2 on llada2_moe)"),
            std::string::npos);
}

TEST(Llada2Engine, TokenizerAndChatTemplateFromTheCheckpoint) {
  const auto dir = test::model_fixture("llada2-tiny");
  const auto tmpl = ChatTemplate::load(dir);
  const std::string text =
      tmpl.render(nlohmann::json::parse(R"([{"role": "user", "content": "the cat"}])"), true);
  EXPECT_EQ(text,
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>the "
            "cat<|role_end|><role>ASSISTANT</role>");
  const auto tok = Tokenizer::load(dir);
  const auto ids = tok.encode(text);
  // Role markers are single special tokens (291 <role>, 292 </role>, 293 <|role_end|>).
  EXPECT_EQ(ids.front(), 291);
  EXPECT_EQ(ids.back(), 292);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 293), 2);
  EXPECT_EQ(tok.decode(ids, false), text);
}

}  // namespace
}  // namespace dllm
