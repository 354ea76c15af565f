// Block decoders against a scripted fake model: each unmasking rule, the plans they make, and
// the edge cases (all-confident block, nothing above threshold, stop mid-block, max mid-block).
#include <gtest/gtest.h>

#include "core/error.h"
#include "decode/block_schedule.h"
#include "engine/engine_core.h"
#include "support/fake_backend.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using test::FakeBackend;
using test::stats;

constexpr int32_t kMask = 99;

ModelConfig sdar_config() {
  ModelConfig c;
  c.family = "sdar";
  c.vocab_size = 100;
  c.mask_token_id = kMask;
  c.block_size = 4;
  c.attention = AttentionKind::kBlockCausal;
  return c;
}

ModelConfig fast_config() {
  ModelConfig c = sdar_config();
  c.family = "fast_dllm_v2";
  c.block_size = 8;
  c.shifted_logits = true;
  return c;
}

// Runs a decoder to completion against the fake backend (the Engine's loop without a Model).
struct Run {
  std::vector<int32_t> ids;
  std::string finish;
  std::vector<std::vector<int32_t>> canvases;
};

Run run(const ModelConfig& c, DecodeParams p, const std::vector<int32_t>& prompt, FakeBackend& fake,
        std::vector<int64_t> stops = {}) {
  p = resolve_decode_params(c, p, static_cast<int64_t>(prompt.size()));
  auto dec = make_decoder(c, p, prompt);
  auto cache = fake.create_cache(dec->cache_capacity());
  Run r;
  r.finish = "length";
  size_t emitted = 0;
  for (;;) {
    SequenceForward f;
    f.cache = cache.get();
    if (!dec->plan(f)) break;
    dec->observe(fake.forward(std::span(&f, 1))[0]);
    r.canvases.push_back(dec->canvas());
    const auto& fin = dec->final_tokens();
    bool done = false;
    for (; emitted < fin.size() && !done; ++emitted) {
      if (std::find(stops.begin(), stops.end(), fin[emitted]) != stops.end()) {
        r.finish = "stop";
        done = true;
      } else if (r.ids.size() == static_cast<size_t>(p.max_tokens)) {
        done = true;
      } else {
        r.ids.push_back(fin[emitted]);
      }
    }
    if (done || r.ids.size() == static_cast<size_t>(p.max_tokens)) break;
  }
  return r;
}

DecodeParams block_params(int32_t max_tokens, const std::string& remasking, float threshold,
                          int32_t steps = 4) {
  DecodeParams p;
  p.strategy = "block";
  p.max_tokens = max_tokens;
  p.remasking = remasking;
  p.threshold = threshold;
  p.steps = steps;
  return p;
}

// Token at position pos is 10 + pos (mod 90): easy to check where each token landed.
int32_t token_at(int32_t pos) {
  return 10 + pos % 80;
}

TEST(TransferSchedule, SplitsLikeTheReference) {
  EXPECT_EQ(transfer_schedule(4, 4), (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(transfer_schedule(8, 3), (std::vector<int32_t>{3, 3, 2}));
  EXPECT_EQ(transfer_schedule(32, 5), (std::vector<int32_t>{7, 7, 6, 6, 6}));
}

TEST(SelectUnmask, Rules) {
  const std::vector<float> conf = {0.5f, 0.9f, 0.2f, 0.95f, 0.9f};
  const std::vector<bool> masked = {true, true, false, true, true};
  EXPECT_EQ(select_unmask("low_confidence_static", conf, masked, 2, 0.0f),
            (std::vector<int32_t>{1, 3}))
      << "ties (0.9 at 1 and 4) break toward the lower position";
  EXPECT_EQ(select_unmask("low_confidence_dynamic", conf, masked, 1, 0.85f),
            (std::vector<int32_t>{1, 3, 4}));
  EXPECT_EQ(select_unmask("low_confidence_dynamic", conf, masked, 4, 0.85f),
            (std::vector<int32_t>{0, 1, 3, 4}))
      << "fewer than k above threshold: top-k";
  EXPECT_EQ(select_unmask("sequential", conf, masked, 2, 0.0f), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(select_unmask("low_confidence_static", conf, masked, 9, 0.0f).size(), 4u)
      << "clamped to masks left";
  EXPECT_THROW(select_unmask("random", conf, masked, 1, 0.0f), Error);
}

TEST(BlockDiffusionDecoder, PlansPrefillDenoiseAndCommit) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return stats(token_at(pos), 0.99f); });
  const auto r =
      run(sdar_config(), block_params(6, "low_confidence_dynamic", 0.9f), {1, 2, 3, 4, 5, 6}, fake);
  // P = 6, B = 4: prefill 4 tokens; block 1 = [5, 6, M, M]; block 2 = [M, M, M, M].
  ASSERT_GE(fake.calls.size(), 4u);
  const auto& pre = fake.calls[0];
  EXPECT_EQ(pre.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(pre.write, CacheWrite::kAppend);
  EXPECT_TRUE(pre.output_rows.empty());
  const auto& d1 = fake.calls[1];
  EXPECT_EQ(d1.tokens, (std::vector<int32_t>{5, 6, kMask, kMask}));
  EXPECT_EQ(d1.positions, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(d1.rule.kind, AttentionKind::kBlockCausal);
  EXPECT_EQ(d1.rule.block_size, 4);
  EXPECT_EQ(d1.write, CacheWrite::kNone);
  EXPECT_EQ(d1.output_rows, (std::vector<int32_t>{2, 3})) << "only the masks are asked about";
  // All confident: one denoising step fills the block, then the commit forward appends it.
  const auto& c1 = fake.calls[2];
  EXPECT_EQ(c1.tokens, (std::vector<int32_t>{5, 6, token_at(6), token_at(7)}));
  EXPECT_EQ(c1.write, CacheWrite::kAppend);
  EXPECT_EQ(fake.calls[3].positions, (std::vector<int32_t>{8, 9, 10, 11}));
  // max_tokens 6 ends mid-block 2: its single denoising step decided it, no commit follows.
  EXPECT_EQ(r.ids, (std::vector<int32_t>{token_at(6), token_at(7), token_at(8), token_at(9),
                                         token_at(10), token_at(11)}));
  EXPECT_EQ(fake.calls.size(), 4u);
}

TEST(BlockDiffusionDecoder, NothingAboveThresholdTakesScheduledTopK) {
  // Confidence rises with position inside the block: the last mask goes first.
  FakeBackend fake([](const SequenceForward&, int32_t pos) {
    return stats(token_at(pos), 0.1f + 0.01f * (pos % 4));
  });
  const auto r =
      run(sdar_config(), block_params(4, "low_confidence_dynamic", 0.9f), {1, 2, 3, 4}, fake);
  ASSERT_EQ(r.canvases.size(), 5u);  // prefill + 4 denoising steps (max reached, no commit)
  EXPECT_EQ(r.canvases[1], (std::vector<int32_t>{kMask, kMask, kMask, token_at(7)}));
  EXPECT_EQ(r.canvases[2], (std::vector<int32_t>{kMask, kMask, token_at(6), token_at(7)}));
  EXPECT_EQ(r.canvases[4],
            (std::vector<int32_t>{token_at(4), token_at(5), token_at(6), token_at(7)}));
  EXPECT_EQ(r.ids.size(), 4u);
}

TEST(BlockDiffusionDecoder, StaticTwoPerStepAndSequential) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) {
    return stats(token_at(pos), 1.0f - 0.1f * (pos % 4));
  });
  auto r =
      run(sdar_config(), block_params(4, "low_confidence_static", 0.0f, 2), {1, 2, 3, 4}, fake);
  EXPECT_EQ(r.canvases[1], (std::vector<int32_t>{token_at(4), token_at(5), kMask, kMask}));
  FakeBackend fake2(
      [](const SequenceForward&, int32_t pos) { return stats(token_at(pos), 0.1f * (pos % 4)); });
  r = run(sdar_config(), block_params(4, "sequential", 0.0f, 4), {1, 2, 3, 4}, fake2);
  EXPECT_EQ(r.canvases[1], (std::vector<int32_t>{token_at(4), kMask, kMask, kMask}))
      << "sequential ignores confidence";
}

TEST(BlockDiffusionDecoder, StopTokenMidBlockEndsWithoutCommit) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return stats(token_at(pos), 0.99f); });
  const auto r = run(sdar_config(), block_params(20, "low_confidence_dynamic", 0.9f), {1, 2, 3, 4},
                     fake, {token_at(9)});
  EXPECT_EQ(r.finish, "stop");
  EXPECT_EQ(r.ids, (std::vector<int32_t>{token_at(4), token_at(5), token_at(6), token_at(7),
                                         token_at(8)}));
  // prefill, block 1 (denoise + commit), block 2 denoise -> stop visible in the final tokens.
  EXPECT_EQ(fake.calls.size(), 4u);
}

TEST(BlockDiffusionDecoder, ConfidenceKindPicksTheStat) {
  // p_token (filtered) high, p_token_tempered low: only --confidence filtered passes the threshold.
  auto script = [](const SequenceForward&, int32_t pos) {
    TokenStats s = stats(token_at(pos), 0.99f);
    s.p_token_tempered = 0.01f;
    return s;
  };
  FakeBackend a(script), b(script);
  auto p = block_params(4, "low_confidence_dynamic", 0.5f);
  EXPECT_EQ(run(sdar_config(), p, {1, 2, 3, 4}, a).canvases.size(), 5u);
  p.confidence = ConfidenceKind::kFiltered;
  EXPECT_EQ(run(sdar_config(), p, {1, 2, 3, 4}, b).canvases.size(), 2u);
}

TEST(FastDllmV2Decoder, SubBlocksShiftedRowsAndArFirstToken) {
  // B = 8, sub-blocks of 4. Nothing clears the threshold: exactly one token (the most confident)
  // per forward, sub-block 0 before sub-block 1.
  FakeBackend fake([](const SequenceForward&, int32_t pos) {
    return stats(token_at(pos), 0.1f + 0.01f * (pos % 8));
  });
  DecodeParams p;
  p.strategy = "block";
  p.max_tokens = 9;
  p.sub_block_length = 4;
  p.threshold = 0.9f;
  const auto r = run(fast_config(), p, {1, 2, 3}, fake);
  const auto& d1 = fake.calls[0];
  EXPECT_EQ(d1.tokens, (std::vector<int32_t>{1, 2, 3, kMask, kMask, kMask, kMask, kMask}));
  EXPECT_EQ(d1.output_rows, (std::vector<int32_t>{2}))
      << "sub-block 0 holds one mask (position 3), read from row 2";
  EXPECT_EQ(d1.rng_positions, (std::vector<int32_t>{3}));
  EXPECT_EQ(fake.calls[1].output_rows, (std::vector<int32_t>{3, 4, 5, 6}))
      << "sub-block 1: masks 4..7 from rows 3..6";
  EXPECT_EQ(r.canvases[1], (std::vector<int32_t>{token_at(3), kMask, kMask, kMask, token_at(7)}));
  // After 5 denoising forwards the block is full; the commit forward's last row gives token 8.
  const auto& commit = fake.calls[5];
  EXPECT_EQ(commit.write, CacheWrite::kAppend);
  EXPECT_EQ(commit.output_rows, (std::vector<int32_t>{7}));
  EXPECT_EQ(r.ids.size(), 9u);
  EXPECT_EQ(r.ids[5], token_at(7))
      << "the AR token (position 8) is the commit forward's argmax of row 7";
}

TEST(FastDllmV2Decoder, PromptOnBlockBoundaryPrefillsAndTakesArToken) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return stats(token_at(pos), 0.99f); });
  DecodeParams p;
  p.strategy = "block";
  p.max_tokens = 3;
  p.sub_block_length = 4;
  const auto r = run(fast_config(), p, {1, 2, 3, 4, 5, 6, 7, 8}, fake);
  EXPECT_EQ(fake.calls[0].tokens.size(), 8u);
  EXPECT_EQ(fake.calls[0].output_rows, (std::vector<int32_t>{7}));
  EXPECT_EQ(fake.calls[1].tokens[0], token_at(7)) << "the block starts with the prefill's AR token";
  EXPECT_EQ(r.ids[0], token_at(7));
}

TEST(ArDecoder, MaskTokenAndShiftedPlans) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return stats(token_at(pos), 0.5f); });
  DecodeParams p;
  p.strategy = "ar";
  p.max_tokens = 3;
  auto r = run(sdar_config(), p, {1, 2}, fake);
  EXPECT_EQ(fake.calls[0].tokens, (std::vector<int32_t>{1, 2, kMask}));
  EXPECT_EQ(fake.calls[0].append_count, 2);
  EXPECT_EQ(fake.calls[1].tokens, (std::vector<int32_t>{token_at(2), kMask}));
  EXPECT_EQ(fake.calls[1].positions, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{token_at(2), token_at(3), token_at(4)}));
  FakeBackend fake2([](const SequenceForward&, int32_t pos) { return stats(token_at(pos), 0.5f); });
  r = run(fast_config(), p, {1, 2}, fake2);
  EXPECT_EQ(fake2.calls[0].tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(fake2.calls[0].output_rows, (std::vector<int32_t>{1}));
  EXPECT_EQ(fake2.calls[1].tokens, (std::vector<int32_t>{token_at(2)}));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{token_at(2), token_at(3), token_at(4)}));
}

TEST(DecodeParams, BadInputIsNamed) {
  auto expect = [](const ModelConfig& c, DecodeParams p, int64_t prompt,
                   const std::string& needle) {
    try {
      resolve_decode_params(c, p, prompt);
      ADD_FAILURE() << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const ModelConfig c = sdar_config();
  expect(c, block_params(8, "", -1), 0, "prompt is empty");
  expect(c, block_params(0, "", -1), 3, "--max-tokens must be positive");
  expect(c, block_params(8, "", -1, 5), 3, "--steps 5 exceeds the block length 4");
  expect(c, block_params(8, "", 1.5f), 3, "--threshold must be in [0, 1]");
  expect(c, block_params(8, "lowest", -1), 3, "--remasking 'lowest'");
  auto p = block_params(8, "", -1);
  p.strategy = "full";
  expect(c, p, 3, "'full' is not available for sdar");
  p = block_params(8, "", -1);
  p.block_length = -4;
  expect(c, p, 3, "--block-length must be positive");
  p = block_params(8, "", -1);
  p.sampler.temperature = -1;
  expect(c, p, 3, "--temperature");
  ModelConfig small = c;
  small.max_position_embeddings = 16;
  expect(small, block_params(20, "", -1), 3, "exceeds the model's context of 16");
}

}  // namespace
}  // namespace dllm
