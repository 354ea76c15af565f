// The group's side of the vocabulary-parallel LM head (issue 27): rank results — each row's
// partial of its slice, or its slice of the logits — joined into what one device returns for
// the whole rows: statistics, S2D2's span statistics, kept draft rows and their verification.
#include "backend/vocab_parallel_outputs.h"

#include <gtest/gtest.h>

#include <random>

#include "backend/host_token_stats.h"
#include "decode/s2d2_verify.h"

namespace dllm {
namespace {

constexpr int64_t kVocab = 50;
const std::vector<int64_t> kWidths = {20, 30};

SequenceForward rows_request(size_t m) {
  SequenceForward seq;
  seq.tokens.assign(m, 1);
  for (size_t i = 0; i < m; ++i) seq.positions.push_back(static_cast<int32_t>(10 + i));
  for (size_t i = 0; i < m; ++i) seq.output_rows.push_back(static_cast<int32_t>(i));
  return seq;
}

std::vector<float> random_rows(size_t m, std::mt19937& rng) {
  std::normal_distribution<float> logit(0.0f, 2.0f);
  std::vector<float> rows(m * kVocab);
  for (float& v : rows) v = logit(rng);
  return rows;
}

// Rank r's slice of every row.
std::vector<float> slice_of(const std::vector<float>& rows, size_t m, int r) {
  const int64_t begin = r == 0 ? 0 : kWidths[0];
  std::vector<float> out;
  for (size_t i = 0; i < m; ++i)
    out.insert(out.end(), rows.begin() + static_cast<std::ptrdiff_t>(i * kVocab + begin),
               rows.begin() + static_cast<std::ptrdiff_t>(i * kVocab + begin + kWidths[r]));
  return out;
}

std::vector<SequenceResult> slices_as_results(const std::vector<float>& rows, size_t m) {
  std::vector<SequenceResult> ranks(2);
  for (int r = 0; r < 2; ++r) ranks[size_t(r)].logits = slice_of(rows, m, r);
  return ranks;
}

void join(const SequenceForward& seq, std::vector<SequenceResult>& ranks,
          std::vector<float>& kept) {
  SequenceResult* both[] = {&ranks[0], &ranks[1]};
  join_vocab_slices(seq, both, kWidths, kVocab, kept);
}

TEST(VocabParallelOutputs, GreedyPartialsMergeIntoStatsAndSpanStats) {
  std::mt19937 rng(3);
  const size_t m = 4;
  const std::vector<float> rows = random_rows(m, rng);
  SequenceForward seq = rows_request(m);
  seq.want_stats = seq.want_span_stats = true;
  seq.sampler.banned_tokens = {2, 33};
  std::vector<SequenceResult> ranks(2);
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> slice = slice_of(rows, m, r);
    for (size_t i = 0; i < m; ++i)
      ranks[size_t(r)].vocab_partials.push_back(vocab_shard_partial(
          std::span<const float>(slice).subspan(i * size_t(kWidths[r]), size_t(kWidths[r])),
          r == 0 ? 0 : static_cast<int32_t>(kWidths[0]), seq.sampler, nullptr, 0));
  }
  std::vector<float> kept;
  join(seq, ranks, kept);
  const auto want = token_stats_on_host(seq, rows, kVocab);
  const auto want_span = span_stats_on_host(seq, rows, want, kVocab);
  ASSERT_EQ(ranks[0].stats.size(), m);
  ASSERT_EQ(ranks[0].span_stats.size(), m);
  EXPECT_TRUE(ranks[0].vocab_partials.empty());
  for (size_t i = 0; i < m; ++i) {
    EXPECT_EQ(ranks[0].stats[i].token, want[i].token);
    EXPECT_NE(ranks[0].stats[i].token, 2);
    EXPECT_NEAR(ranks[0].stats[i].p_max, want[i].p_max, 1e-6);
    EXPECT_NEAR(ranks[0].span_stats[i].norm_entropy, want_span[i].norm_entropy, 1e-6);
    EXPECT_NEAR(ranks[0].span_stats[i].margin, want_span[i].margin, 1e-6);
    EXPECT_NEAR(ranks[0].span_stats[i].collision, want_span[i].collision, 1e-9);
    EXPECT_NEAR(ranks[0].span_stats[i].p_token, want_span[i].p_token, 1e-6);
  }
}

// S2D2 through a group: the draft forward's rows are kept whole by the group, the verify
// forward's slices joined and checked against them — as one device verifies.
TEST(VocabParallelOutputs, SlicesJoinForSampledStatsKeptRowsAndVerification) {
  std::mt19937 rng(4);
  const size_t m = 3;
  const std::vector<float> draft = random_rows(m, rng), verifier = random_rows(m, rng);
  SequenceForward draft_seq = rows_request(m);
  draft_seq.want_stats = true;
  draft_seq.retain_logits = true;
  draft_seq.sampler.temperature = 0.7f;
  draft_seq.rng = {5, 2, 1};
  SequenceForward rank_request = draft_seq;
  ask_ranks_for_slices(rank_request);
  EXPECT_TRUE(rank_request.want_logits);
  EXPECT_FALSE(rank_request.retain_logits);
  std::vector<float> kept;
  auto ranks = slices_as_results(draft, m);
  join(draft_seq, ranks, kept);
  EXPECT_EQ(kept, draft);
  EXPECT_TRUE(ranks[0].logits.empty()) << "the caller did not ask for logits";
  const auto want = token_stats_on_host(draft_seq, draft, kVocab);
  for (size_t i = 0; i < m; ++i) EXPECT_EQ(ranks[0].stats[i].token, want[i].token);

  SequenceForward verify_seq = rows_request(m);
  verify_seq.want_logits = true;
  verify_seq.sampler.temperature = 0.7f;
  verify_seq.verify = SpanVerify{{0, 1, 2}, {4, 40, 21}, {0.1, 0.5, 0.9}};
  rank_request = verify_seq;
  ask_ranks_for_slices(rank_request);
  EXPECT_FALSE(rank_request.verify.has_value());
  ranks = slices_as_results(verifier, m);
  join(verify_seq, ranks, kept);
  EXPECT_EQ(ranks[0].logits, verifier);
  const auto want_rows =
      verify_span_rows(verifier, draft, kVocab, *verify_seq.verify, verify_seq.sampler);
  ASSERT_EQ(ranks[0].verify_rows.size(), m);
  for (size_t i = 0; i < m; ++i) {
    EXPECT_EQ(ranks[0].verify_rows[i].q_token, want_rows[i].q_token);
    EXPECT_EQ(ranks[0].verify_rows[i].p_token, want_rows[i].p_token);
    EXPECT_EQ(ranks[0].verify_rows[i].residual_token, want_rows[i].residual_token);
  }
}

}  // namespace
}  // namespace dllm
