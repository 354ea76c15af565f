// The GPU tests' near-tie evidence (tests/support/decision_trace.h) on hand-made traces: where two
// runs part, and what is measured there.
#include "support/decision_trace.h"

#include <gtest/gtest.h>

namespace dllm::test {
namespace {

TokenStats row(int32_t token, float p, float margin) {
  TokenStats s;
  s.token = token;
  s.p_token_tempered = p;
  s.margin = margin;
  return s;
}

ForwardRecord record(std::vector<int32_t> canvas, std::vector<TokenStats> stats) {
  ForwardRecord r;
  r.canvas = std::move(canvas);
  r.stats = std::move(stats);
  return r;
}

DecodeParams greedy(float threshold) {
  DecodeParams d;
  d.threshold = threshold;
  return d;
}

TEST(DecisionTrace, EqualTracesNeverPart) {
  const DecodeTrace t = {record({1, 9}, {row(5, 0.5f, 0.2f)}), record({1, 5}, {})};
  EXPECT_FALSE(first_parting(t, t, greedy(0.9f)).has_value());
}

TEST(DecisionTrace, PartsWhereTheCanvasFirstDiffersAndMeasuresTheReference) {
  const DecodeTrace reference = {record({1, 9, 9}, {row(5, 0.50f, 0.3f), row(6, 0.20f, 0.1f)}),
                                 record({1, 5, 9}, {row(6, 0.40f, 0.004f)})};
  DecodeTrace run = reference;
  run[1].canvas = {1, 5, 7};
  run[1].stats[0].p_token_tempered = 0.41f;
  const auto p = first_parting(run, reference, greedy(0.9f));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->forward, 1u);
  EXPECT_NEAR(p->margin, 0.004 / 0.40, 1e-6);  // the row's own top-2 gap, relative
  EXPECT_NEAR(p->disagreement, 0.01 / 0.40, 1e-6);
}

TEST(DecisionTrace, ADifferentTokenPartsEvenWhereTheCanvasAgrees) {
  // S2D2's drafts: the canvas is the same, the proposal is not.
  const DecodeTrace reference = {record({1, 9}, {row(5, 0.30f, 0.1f), row(6, 0.30f, 0.1f)}),
                                 record({1, 9}, {})};
  DecodeTrace run = reference;
  run[0].stats[1].token = 7;
  const auto p = first_parting(run, reference, greedy(0.9f));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->forward, 0u);
  EXPECT_NEAR(p->margin, 0.0, 1e-6);  // two rows at the same confidence: the order is a tie
  EXPECT_NEAR(p->disagreement, 0.0, 1e-6);
}

TEST(DecisionTrace, TheMarginCountsTheThresholdsAndOtherRows) {
  const std::vector<TokenStats> rows = {row(1, 0.50f, 0.4f), row(2, 0.30f, 0.2f)};
  EXPECT_NEAR(closest_decision_margin(rows, greedy(0.9f)), 0.2 / 0.5, 1e-6);
  EXPECT_NEAR(closest_decision_margin(rows, greedy(0.31f)), 0.01 / 0.3, 1e-6);
  DecodeParams edit = greedy(0.9f);
  edit.editing_threshold = 0.49f;
  EXPECT_NEAR(closest_decision_margin(rows, edit), 0.01 / 0.5, 1e-6);
}

TEST(DecisionTrace, AShorterRunPartsAtItsLastForwardAndAnEmptyOneShowsNothing) {
  const DecodeTrace reference = {record({1, 9}, {row(5, 0.5f, 0.01f)}), record({1, 5}, {})};
  const DecodeTrace run = {reference[0]};
  const auto p = first_parting(run, reference, greedy(0.9f));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->forward, 0u);
  const auto none = first_parting({}, reference, greedy(0.9f));
  ASSERT_TRUE(none.has_value());
  EXPECT_GT(none->margin, kNearTie);
}

// MoE models: the first row routed apart, in a forward up to the parting, is what is measured.
TEST(DecisionTrace, ARowRoutedApartIsMeasuredByTheReferencesRoutingGap) {
  DecodeTrace reference = {record({1, 9, 9}, {row(5, 0.5f, 0.3f)}),
                           record({1, 5, 9}, {row(6, 0.6f, 0.3f)})};
  // Two rows, k = 2 experts each, one MoE layer.
  reference[0].routed_experts = {0, 3, 1, 2};
  reference[0].routing_gaps = {0.2, 0.3};
  reference[1].routed_experts = {0, 3, 1, 2};
  reference[1].routing_gaps = {0.25, 0.004};
  DecodeTrace run = reference;
  run[1].canvas = {1, 5, 7};
  run[1].stats[0].p_token_tempered = 0.2f;  // other experts: other numbers
  auto p = first_parting(run, reference, greedy(0.9f));
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->routing_forward.has_value());  // routed alike: the numbers must agree
  run[1].routed_experts = {0, 3, 1, 3};          // the second row's experts differ
  p = first_parting(run, reference, greedy(0.9f));
  ASSERT_TRUE(p.has_value());
  ASSERT_TRUE(p->routing_forward.has_value());
  EXPECT_EQ(*p->routing_forward, 1u);
  EXPECT_EQ(p->routing_gap, 0.004);
  run[0].routed_experts = {0, 1, 1, 2};  // earlier, in the first row of the first forward
  p = first_parting(run, reference, greedy(0.9f));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p->routing_forward, 0u);
  EXPECT_EQ(p->routing_gap, 0.2);
  EXPECT_FALSE(p->routing_unseen);
}

TEST(DecisionTrace, RoutingOfAReusedPrefixOrOfOtherRowsIsUnseen) {
  DecodeTrace reference = {record({1, 9, 9}, {row(5, 0.5f, 0.3f)}),
                           record({1, 5, 9}, {row(6, 0.6f, 0.3f)})};
  reference[0].routed_experts = {0, 3, 1, 2};
  reference[0].routing_gaps = {0.2, 0.3};
  reference[1].routed_experts = {0, 3};
  reference[1].routing_gaps = {0.25};
  DecodeTrace run = reference;
  run[1].canvas = {1, 5, 7};
  run[0].routed_experts = {1, 2};  // a prefill past a shared first row routes one row only
  run[0].routing_gaps = {0.3};
  auto p = first_parting(run, reference, greedy(0.9f));
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->routing_unseen);
  EXPECT_FALSE(p->routing_forward.has_value());
  run[1].routed_experts = {1, 3};  // apart after the unseen rows: not measured
  p = first_parting(run, reference, greedy(0.9f));
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->routing_unseen);
  EXPECT_FALSE(p->routing_forward.has_value());
  run[1].routed_experts = reference[1].routed_experts;
  run[0] = reference[0];
  mark_reused_prefix(run);  // the same rows, but past pages another request computed
  EXPECT_TRUE(run[0].reused_prefix);
  p = first_parting(run, reference, greedy(0.9f));
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->routing_unseen);
  DecodeTrace dense = {record({1, 9}, {row(5, 0.5f, 0.3f)})};  // no routing: nothing unseen
  mark_reused_prefix(dense);
  EXPECT_FALSE(dense[0].reused_prefix);
}

}  // namespace
}  // namespace dllm::test
