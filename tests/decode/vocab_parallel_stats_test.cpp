// Vocabulary-parallel token statistics: a row's logits cut into shards at random places, each
// shard reduced to its partial, the partials merged — against compute_token_stats on the whole
// row (the same tokens; probabilities to float rounding).
#include "decode/vocab_parallel_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace dllm {
namespace {

// Shard starts for `vocab` ids in `shards` non-empty shards at random places (0 first).
std::vector<int32_t> random_cuts(int32_t vocab, int shards, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab - 1));
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> cuts(ids.begin(), ids.begin() + (shards - 1));
  cuts.push_back(0);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// What the ranks and the merge compute together for one row: every shard's partial, the
// inverse-CDF draw's second pass on the shard that holds it, then the merge.
TokenStats sharded_stats(const std::vector<float>& logits, const std::vector<int32_t>& cuts,
                         const SamplerConfig& sampler, const RngKey& key, int32_t position,
                         double u) {
  auto slice = [&](size_t r) {
    const size_t end = r + 1 < cuts.size() ? static_cast<size_t>(cuts[r + 1]) : logits.size();
    return std::span<const float>(logits).subspan(static_cast<size_t>(cuts[r]), end - cuts[r]);
  };
  std::vector<VocabShardPartial> partials;
  for (size_t r = 0; r < cuts.size(); ++r)
    partials.push_back(vocab_shard_partial(slice(r), cuts[r], sampler, &key, position));
  DrawnToken drawn;
  if (!sampler.greedy() && sampler.method == SampleMethod::kInverseCdf) {
    const ShardDraw at = locate_shard_draw(partials, sampler, u);
    drawn = draw_in_shard(slice(at.shard), cuts[at.shard], sampler, at.local_target);
  }
  return merge_vocab_shards(partials, sampler, drawn);
}

void expect_same_stats(const TokenStats& got, const TokenStats& want, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.argmax, want.argmax);
  EXPECT_EQ(got.token, want.token);
  auto near = [](float a, float b) { return std::abs(a - b) <= 2e-6f + 2e-5f * std::abs(b); };
  EXPECT_PRED2(near, got.p_max, want.p_max);
  EXPECT_PRED2(near, got.entropy, want.entropy);
  EXPECT_PRED2(near, got.margin, want.margin);
  EXPECT_PRED2(near, got.p_token, want.p_token);
  EXPECT_PRED2(near, got.p_token_tempered, want.p_token_tempered);
  EXPECT_PRED2(near, got.entropy_filtered, want.entropy_filtered);
  EXPECT_PRED2(near, got.margin_filtered, want.margin_filtered);
  EXPECT_PRED2(near, got.p_token_raw, want.p_token_raw);
}

struct NamedSampler {
  std::string name;
  SamplerConfig sampler;
};

std::vector<NamedSampler> samplers() {
  std::vector<NamedSampler> out;
  out.push_back({"greedy", SamplerConfig{}});
  SamplerConfig banned;
  banned.banned_tokens = {3, 500, 996};
  out.push_back({"greedy, banned tokens", banned});
  for (float t : {0.7f, 1.0f, 1.6f}) {
    SamplerConfig s;
    s.temperature = t;
    out.push_back({"inverse CDF at T " + std::to_string(t), s});
  }
  for (float t : {0.5f, 1.0f}) {
    SamplerConfig s;
    s.temperature = t;
    s.method = SampleMethod::kGumbelMax;
    s.banned_tokens = {7};
    out.push_back({"Gumbel-max at T " + std::to_string(t), s});
  }
  SamplerConfig confidence;
  confidence.confidence_banned_tokens = {10, 11, 900};
  out.push_back({"greedy, confidence-banned tokens", confidence});
  SamplerConfig sampled_confidence = confidence;
  sampled_confidence.temperature = 0.8f;
  out.push_back({"sampled, confidence-banned tokens", sampled_confidence});
  return out;
}

TEST(VocabParallelStats, ShardsMergeIntoTheWholeRowsStatistics) {
  std::mt19937 rng(2026);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  constexpr int32_t kVocab = 997;
  for (const NamedSampler& ns : samplers()) {
    for (int row = 0; row < 40; ++row) {
      std::vector<float> logits(kVocab);
      for (float& v : logits) v = logit(rng);
      // Some rows with a peaked distribution (one token near certain), as decoding sees.
      if (row % 4 == 0) logits[static_cast<size_t>(rng() % kVocab)] += 25.0f;
      const RngKey key{static_cast<uint64_t>(row) + 1, 7, static_cast<uint32_t>(row)};
      const int32_t position = 100 + row;
      const double u = ns.sampler.greedy() || ns.sampler.method != SampleMethod::kInverseCdf
                           ? 0.0
                           : uniform(key, position, RngStream::kTokenSample);
      const TokenStats want = compute_token_stats(logits, ns.sampler, key, position);
      for (int shards : {1, 2, 3, 8}) {
        const auto cuts = random_cuts(kVocab, shards, rng);
        expect_same_stats(
            sharded_stats(logits, cuts, ns.sampler, key, position, u), want,
            ns.name + ", row " + std::to_string(row) + ", " + std::to_string(shards) + " shards");
      }
    }
  }
}

// S2D2's Renyi-2 estimate on greedy rows: the sum of p^2 of softmax(l), from the partials.
TEST(VocabParallelStats, ShardsMergeIntoTheWholeRowsCollision) {
  std::mt19937 rng(7);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  constexpr int32_t kVocab = 501;
  for (int row = 0; row < 20; ++row) {
    std::vector<float> logits(kVocab);
    for (float& v : logits) v = logit(rng);
    if (row % 3 == 0) logits[static_cast<size_t>(rng() % kVocab)] += 15.0f;
    const float mx = *std::max_element(logits.begin(), logits.end());
    double z = 0, z2 = 0;
    for (float v : logits) {
      const double e = std::exp(static_cast<double>(v) - mx);
      z += e;
      z2 += e * e;
    }
    const double want = z2 / (z * z);
    for (int shards : {1, 2, 5}) {
      const auto cuts = random_cuts(kVocab, shards, rng);
      std::vector<VocabShardPartial> partials;
      for (size_t r = 0; r < cuts.size(); ++r) {
        const size_t end = r + 1 < cuts.size() ? static_cast<size_t>(cuts[r + 1]) : logits.size();
        partials.push_back(vocab_shard_partial(
            std::span<const float>(logits).subspan(static_cast<size_t>(cuts[r]), end - cuts[r]),
            cuts[r], SamplerConfig{}, nullptr, 0));
      }
      EXPECT_NEAR(merged_collision(partials), want, 1e-12 + 1e-9 * want)
          << "row " << row << ", " << shards << " shards";
    }
  }
}

TEST(VocabParallelStats, TiesAcrossShardsGoToTheLowerIdAndLeaveNoMargin) {
  std::vector<float> logits(64, 0.0f);
  logits[40] = 5.0f;
  logits[9] = 5.0f;  // in another shard than 40, below it
  const std::vector<int32_t> cuts = {0, 16, 32, 48};
  const RngKey key{1, 0, 0};
  const TokenStats st = sharded_stats(logits, cuts, SamplerConfig{}, key, 0, 0.0);
  EXPECT_EQ(st.argmax, 9);
  EXPECT_EQ(st.token, 9);
  EXPECT_EQ(st.margin, 0.0f);
  expect_same_stats(st, compute_token_stats(logits, SamplerConfig{}, 0.0), "tie");
}

TEST(VocabParallelStats, DrawsAtTheEndsOfTheUnitInterval) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
  SamplerConfig s;
  s.temperature = 0.9f;
  s.banned_tokens = {0, 49};                         // the first and last ids can never be drawn
  const std::vector<int32_t> cuts = {0, 1, 20, 48};  // shards of only banned ids at both ends
  const RngKey key{3, 0, 0};
  for (double u : {0.0, 1e-12, 0.5, 1.0 - 1e-15}) {
    const TokenStats want = compute_token_stats(logits, s, u);
    const TokenStats got = sharded_stats(logits, cuts, s, key, 0, u);
    EXPECT_EQ(got.token, want.token) << "u " << u;
    EXPECT_NE(got.token, 0);
    EXPECT_NE(got.token, 49);
  }
}

TEST(VocabParallelStats, FilteredRowsDoNotMerge) {
  SamplerConfig s;
  EXPECT_TRUE(vocab_shards_merge(s, 1000));
  s.temperature = 0.7f;
  EXPECT_TRUE(vocab_shards_merge(s, 1000));
  s.top_k = 50;
  EXPECT_FALSE(vocab_shards_merge(s, 1000));
  s.top_k = 1000;  // keeps every token
  EXPECT_TRUE(vocab_shards_merge(s, 1000));
  s.top_p = 0.9f;
  EXPECT_FALSE(vocab_shards_merge(s, 1000));
}

}  // namespace
}  // namespace dllm
