// Sparse attention's request side: the knobs (--sparse, --sparse-k, ...) parse strictly and are
// refused by name where they do not apply; the decoders' schedule says when a forward selects
// and when it attends through the sets (attention/sparse_schedule.h, method-specs §1.4, §6.2).
#include <gtest/gtest.h>

#include "attention/sparse_schedule.h"
#include "core/error.h"
#include "decode/decode_options.h"
#include "decode/decoder.h"
#include "model/model.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

void expect_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(SparseKnobs, ParseStrictlyAndNameTheKnob) {
  DecodeParams p;
  apply_decode_options(p, {{"strategy", "block"},
                           {"sparse", "mage"},
                           {"sparse_k", "512"},
                           {"sparse-exact-layers", "3"},
                           {"sparse_select_queries", "4"},
                           {"sparse_page_size", "32"},
                           {"sparse_dense_fraction", "0.25"}});
  EXPECT_EQ(p.sparse.method, SparseMethod::kMage);
  EXPECT_EQ(p.sparse.k, 512);
  EXPECT_EQ(p.sparse.exact_layers, 3);
  EXPECT_EQ(p.sparse.select_queries, 4);
  EXPECT_EQ(p.sparse.page_size, 32);
  EXPECT_FLOAT_EQ(p.sparse.dense_fraction, 0.25f);
  const auto bad = [](std::map<std::string, std::string> o, const std::string& what) {
    DecodeParams q;
    expect_error([&] { apply_decode_options(q, o); }, what);
  };
  bad({{"sparse", "dense"}}, "--sparse must be none, mage, quest or sparsed (got 'dense')");
  bad({{"sparse", "mage"}, {"sparse_k", "0"}}, "--sparse-k must be positive");
  bad({{"sparse", "mage"}, {"sparse_k", "1.5"}}, "--sparse-k must be a whole number");
  bad({{"sparse", "quest"}, {"sparse_page_size", "5000"}},
      "--sparse-page-size must be in [1, 4096]");
  bad({{"sparse", "sparsed"}, {"sparse_dense_fraction", "1.5"}},
      "--sparse-dense-fraction must be in [0, 1]");
  bad({{"sparse", "mage"}, {"sparse_exact_layers", "-1"}}, "--sparse-exact-layers must be in [0,");
  bad({{"sparse_k", "64"}}, "--sparse-k needs --sparse mage, quest or sparsed");
}

TEST(SparseKnobs, RefusedWhereTheyDoNotApply) {
  auto sdar = Model::load(test::models_dir() / "tiny-block");  // 6 layers
  auto llada = Model::load(test::model_fixture("llada-tiny"));
  DecodeParams p;
  p.strategy = "block";
  p.sparse.method = SparseMethod::kMage;
  EXPECT_NO_THROW(resolve_decode_params(sdar->config(), p, 8));
  DecodeParams q = p;
  q.sparse.exact_layers = 7;
  expect_error([&] { resolve_decode_params(sdar->config(), q, 8); },
               "--sparse-exact-layers must be in [0, 6] (got 7)");
  q = p;
  q.strategy = "ar";
  expect_error([&] { resolve_decode_params(sdar->config(), q, 8); },
               "--sparse mage applies to --strategy block on SDAR, Fast-dLLM v2 and LLaDA2.x "
               "checkpoints and to --strategy edit on LLaDA2.x (not --strategy ar on sdar)");
  q = p;
  q.fuse_commit = true;
  expect_error([&] { resolve_decode_params(sdar->config(), q, 8); },
               "does not combine with --fuse-commit");
  q = p;
  q.strategy = "full";
  expect_error([&] { resolve_decode_params(llada->config(), q, 8); }, "--sparse mage applies to");
}

SparseParams params(SparseMethod m) {
  SparseParams p;
  p.method = m;
  p.k = 64;
  p.exact_layers = 1;
  return p;
}

struct Planned {
  bool sparse = false;
  SparseMethod select = SparseMethod::kNone;
  bool attend = false;
};

Planned plan(SparseSchedule& s, int32_t block, bool denoise) {
  SequenceForward f;
  s.plan(f, block, denoise);
  if (!f.sparse) return {};
  EXPECT_EQ(f.sparse->k, 64);
  EXPECT_EQ(f.sparse->exact_layers, 1);
  return {true, f.sparse->select, f.sparse->attend_selected};
}

// MAGE: the block's first forward attends exactly and selects; its later steps and its commit
// attend through the set; the next block selects anew.
TEST(SparseSchedule, MageSelectsOncePerBlock) {
  SparseSchedule s(params(SparseMethod::kMage), 100);
  for (int32_t block : {3, 4}) {
    Planned p = plan(s, block, true);
    EXPECT_EQ(p.select, SparseMethod::kMage);
    EXPECT_FALSE(p.attend);
    for (int i = 0; i < 3; ++i) {
      p = plan(s, block, true);
      EXPECT_EQ(p.select, SparseMethod::kNone);
      EXPECT_TRUE(p.attend);
    }
    p = plan(s, block, false);  // commit
    EXPECT_EQ(p.select, SparseMethod::kNone);
    EXPECT_TRUE(p.attend);
  }
}

TEST(SparseSchedule, QuestSelectsEveryForward) {
  SparseSchedule s(params(SparseMethod::kQuest), 100);
  for (bool denoise : {true, true, false, true}) {
    const Planned p = plan(s, 0, denoise);
    EXPECT_EQ(p.select, SparseMethod::kQuest);
    EXPECT_TRUE(p.attend);
  }
}

// SparseD (method-specs §6.2): with 20 steps and fraction 0.2, end = int(20 * 0.2) + 1 = 5:
// steps 0..4 exact, step 5 exact + capture, every later forward (commits too) sparse.
TEST(SparseSchedule, SparseDCapturesOnceAfterTheDenseSteps) {
  SparseSchedule s(params(SparseMethod::kSparseD), 20);
  EXPECT_EQ(s.capture_step(), 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(plan(s, i / 4, true).sparse) << i;
    if (i == 3) {
      EXPECT_FALSE(plan(s, 0, false).sparse) << "commit before the capture";
    }
  }
  Planned p = plan(s, 1, true);
  EXPECT_EQ(p.select, SparseMethod::kSparseD);
  EXPECT_FALSE(p.attend);
  p = plan(s, 1, false);
  EXPECT_TRUE(p.attend);
  for (int i = 0; i < 10; ++i) {
    p = plan(s, 2 + i / 4, i % 4 != 3);
    EXPECT_EQ(p.select, SparseMethod::kNone);
    EXPECT_TRUE(p.attend);
  }
}

// --sparse-recall: a block's first forward selects and returns its sets; every later forward
// attends exactly, selects without keeping and returns the exact top-k; observe() averages
// |S1 ∩ S*| / |S*| over the later forwards of each block.
TEST(SparseSchedule, RecallScoresLaterForwardsAgainstTheBlocksFirstSelection) {
  SparseParams sp = params(SparseMethod::kMage);
  sp.measure_recall = true;
  SparseSchedule s(sp, 100);
  auto result_with = [](std::vector<std::vector<int32_t>> sets) {
    SequenceResult r;
    for (auto& slots : sets) r.sparse_selection.push_back({slots, 100, false});
    return r;
  };
  SequenceForward first;
  s.plan(first, 0, true);
  EXPECT_EQ(first.sparse->select, SparseMethod::kMage);
  EXPECT_TRUE(first.sparse->keep_selection);
  EXPECT_TRUE(first.sparse->want_selection);
  EXPECT_FALSE(first.sparse->attend_selected);
  s.observe(result_with({{1, 2, 3, 4}, {10, 11, 12, 13}}));
  SequenceForward later;
  s.plan(later, 0, true);
  EXPECT_EQ(later.sparse->select, SparseMethod::kMage);
  EXPECT_FALSE(later.sparse->keep_selection);
  EXPECT_TRUE(later.sparse->want_selection);
  EXPECT_FALSE(later.sparse->attend_selected) << "the diagnostic's later steps attend exactly";
  s.observe(result_with({{1, 2, 5, 6}, {10, 11, 12, 13}}));  // (2/4 + 4/4) / 2
  SequenceForward commit;
  s.plan(commit, 0, false);
  s.observe(result_with({{1, 2, 3, 4}, {20, 21, 22, 23}}));  // (4/4 + 0/4) / 2
  EXPECT_EQ(s.recall_steps(), 2);
  EXPECT_DOUBLE_EQ(s.mean_recall(), (0.75 + 0.5) / 2);
  // The next block selects afresh: its later steps score against its own first selection.
  SequenceForward next;
  s.plan(next, 1, true);
  s.observe(result_with({{7, 8, 9, 10}, {1, 2, 3, 4}}));
  s.plan(later, 1, true);
  s.observe(result_with({{7, 8, 9, 10}, {1, 2, 3, 4}}));
  EXPECT_EQ(s.recall_steps(), 3);
  EXPECT_DOUBLE_EQ(s.mean_recall(), (0.75 + 0.5 + 1.0) / 3);
}

TEST(SparseKnobs, RecallMeasuresMageOnly) {
  auto sdar = Model::load(test::models_dir() / "tiny-block");
  DecodeParams p;
  apply_decode_options(p, {{"strategy", "block"}, {"sparse", "quest"}, {"sparse_recall", "true"}});
  EXPECT_TRUE(p.sparse.measure_recall);
  expect_error([&] { resolve_decode_params(sdar->config(), p, 16); },
               "--sparse-recall measures MAGE's selection (--sparse mage), not --sparse quest");
}

TEST(SparseSchedule, NoneAddsNothing) {
  SparseSchedule s(SparseParams{}, 10);
  EXPECT_FALSE(plan(s, 0, true).sparse);
  EXPECT_FALSE(plan(s, 0, false).sparse);
}

}  // namespace
}  // namespace dllm
