// TokenEditingDecoder (LLaDA2.1 M2T + T2T) driven by scripted statistics: which rows it asks
// about, what it fills and overwrites, when a block ends (edits stop, or the post-mask budget
// runs out) and that tokens become final only with their block.
#include <gtest/gtest.h>

#include "decode/token_editing_decoder.h"

namespace dllm {
namespace {

constexpr int32_t kMask = 99;

ModelConfig config() {
  ModelConfig c;
  c.family = "llada2_moe";
  c.mask_token_id = kMask;
  return c;
}

DecodeParams params(int32_t max_post_steps) {
  DecodeParams p;
  p.strategy = "edit";
  p.block_length = 4;
  p.max_tokens = 6;
  p.threshold = 0.5f;
  p.editing_threshold = 0.5f;
  p.max_post_steps = max_post_steps;
  return p;
}

SequenceResult stats(std::vector<std::pair<int32_t, float>> rows) {
  SequenceResult r;
  for (auto [token, p] : rows) {
    TokenStats s;
    s.token = token;
    s.p_token = p;
    r.stats.push_back(s);
  }
  return r;
}

TEST(TokenEditingDecoder, FillsEditsAndFinalisesWholeBlocks) {
  TokenEditingDecoder d(config(), params(1), {7, 8});  // the prompt shares the first block
  SequenceForward f;
  ASSERT_TRUE(d.plan(f));
  EXPECT_EQ(f.tokens, (std::vector<int32_t>{7, 8, kMask, kMask}));
  EXPECT_EQ(f.output_rows, (std::vector<int32_t>{2, 3})) << "prompt rows are never edited";
  EXPECT_EQ(f.write, CacheWrite::kNone);
  d.observe(stats({{10, 0.9f}, {11, 0.3f}}));  // M2T: only row 2 is above the threshold
  EXPECT_EQ(d.canvas(), (std::vector<int32_t>{10, kMask}));
  EXPECT_TRUE(d.final_tokens().empty()) << "T2T may still rewrite the block";

  f = {};
  ASSERT_TRUE(d.plan(f));
  // T2T: row 2 differs with p 0.8 > 0.5; M2T: no mask above 0.5, so the most confident (row 3).
  d.observe(stats({{12, 0.8f}, {13, 0.2f}}));
  EXPECT_EQ(d.canvas(), (std::vector<int32_t>{12, 13}));
  EXPECT_TRUE(d.final_tokens().empty()) << "one post-mask forward is still allowed";

  f = {};
  ASSERT_TRUE(d.plan(f));
  d.observe(stats({{12, 0.9f}, {14, 0.6f}}));  // an edit, and the budget (1) is spent
  EXPECT_EQ(d.final_tokens(), (std::vector<int32_t>{12, 14}));

  f = {};
  ASSERT_TRUE(d.plan(f));  // commit of the finished block
  EXPECT_EQ(f.write, CacheWrite::kAppend);
  EXPECT_EQ(f.tokens, (std::vector<int32_t>{7, 8, 12, 14}));
  d.observe({});
  f = {};
  ASSERT_TRUE(d.plan(f));  // the next block: every row is generated
  EXPECT_EQ(f.output_rows, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(f.positions.front(), 4);
  EXPECT_EQ(d.forwards(), 5);
}

TEST(TokenEditingDecoder, BlockEndsWhenAPostMaskForwardEditsNothing) {
  TokenEditingDecoder d(config(), params(16), {7, 8});
  SequenceForward f;
  d.plan(f);
  d.observe(stats({{10, 0.9f}, {11, 0.7f}}));  // both masks filled
  EXPECT_TRUE(d.final_tokens().empty());
  f = {};
  d.plan(f);
  // Differing tokens below the editing threshold and agreeing tokens above it: no edit.
  d.observe(stats({{20, 0.4f}, {11, 0.9f}}));
  EXPECT_EQ(d.final_tokens(), (std::vector<int32_t>{10, 11}));
}

TEST(TokenEditingDecoder, ZeroPostStepsEndsTheBlockWithItsLastMask) {
  TokenEditingDecoder d(config(), params(0), {7, 8});
  SequenceForward f;
  d.plan(f);
  d.observe(stats({{10, 0.9f}, {11, 0.7f}}));
  EXPECT_EQ(d.final_tokens(), (std::vector<int32_t>{10, 11}));
}

}  // namespace
}  // namespace dllm
