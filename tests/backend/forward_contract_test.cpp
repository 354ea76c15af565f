// The forward contract on the CPU backend: custom masks, visible slot lists, write-at-slots,
// batching, and request validation.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "core/error.h"
#include "support/rel_error.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using test::rel_error;

SequenceForward request(std::vector<int32_t> ids, std::vector<int32_t> pos, AttentionRule rule) {
  SequenceForward f;
  f.tokens = std::move(ids);
  f.positions = std::move(pos);
  f.rule = std::move(rule);
  f.want_logits = true;
  f.output_rows.resize(f.tokens.size());
  std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
  return f;
}

std::vector<float> forward1(Backend& b, const SequenceForward& f) {
  return b.forward(std::span(&f, 1))[0].logits;
}

class ForwardContract : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::model_fixture("sdar-tiny"));
    backend_ = make_cpu_backend(*model_);
    vocab_ = model_->config().vocab_size;
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  int64_t vocab_ = 0;
  const std::vector<int32_t> ids_ = {3, 99, 17, 250, 5, 8, 290, 290, 41, 7};
  std::vector<int32_t> pos_ = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
};

TEST_F(ForwardContract, CustomMaskEqualsBuiltInRule) {
  const auto block = forward1(*backend_, request(ids_, pos_, AttentionRule::block_causal(4)));
  const size_t n = ids_.size();
  std::vector<uint8_t> mask(n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) mask[i * n + j] = pos_[j] / 4 <= pos_[i] / 4;
  const auto custom = forward1(*backend_, request(ids_, pos_, AttentionRule::custom(mask)));
  EXPECT_LT(rel_error(custom, block), 1e-6);
  const auto causal = forward1(*backend_, request(ids_, pos_, AttentionRule::causal()));
  EXPECT_GT(rel_error(causal, block), 1e-3) << "different rules must give different logits";
}

// Custom mask columns are [visible cache | queries]: S2D2-style verifier masks over a cached
// prefix.
TEST_F(ForwardContract, CustomMaskOverCache) {
  auto cache = backend_->create_cache(16);
  SequenceForward pre = request({ids_.begin(), ids_.begin() + 4}, {pos_.begin(), pos_.begin() + 4},
                                AttentionRule::causal());
  pre.cache = cache.get();
  pre.write = CacheWrite::kAppend;
  pre.output_rows.clear();
  backend_->forward(std::span(&pre, 1));
  // Queries: causal among themselves, all of the cache visible == plain causal continuation.
  const size_t nq = 6, nk = 4 + nq;
  std::vector<uint8_t> mask(nq * nk, 0);
  for (size_t i = 0; i < nq; ++i)
    for (size_t j = 0; j < 4 + i + 1; ++j) mask[i * nk + j] = 1;
  SequenceForward q = request({ids_.begin() + 4, ids_.end()}, {pos_.begin() + 4, pos_.end()},
                              AttentionRule::custom(mask));
  q.cache = cache.get();
  const auto got = forward1(*backend_, q);
  const auto full = forward1(*backend_, request(ids_, pos_, AttentionRule::causal()));
  EXPECT_LT(rel_error(got, std::span(full).subspan(4 * vocab_)), 1e-5);
}

// A visible slot list restricts the keys: attending to slots {0, 2} of a 4-slot cache equals a
// custom mask over the whole cache that hides slots 1 and 3.
TEST_F(ForwardContract, VisibleSlotSubset) {
  auto cache = backend_->create_cache(8);
  SequenceForward pre = request({ids_.begin(), ids_.begin() + 4}, {pos_.begin(), pos_.begin() + 4},
                                AttentionRule::bidirectional());
  pre.cache = cache.get();
  pre.write = CacheWrite::kAppend;
  backend_->forward(std::span(&pre, 1));

  SequenceForward q = request({ids_[5], ids_[6]}, {pos_[5], pos_[6]}, AttentionRule::causal());
  q.cache = cache.get();
  q.visible_slots = std::vector<int32_t>{0, 2};
  const auto got = forward1(*backend_, q);

  // Columns: [slot 0, slot 1, slot 2, slot 3 | query 0, query 1].
  SequenceForward q2 = request({ids_[5], ids_[6]}, {pos_[5], pos_[6]},
                               AttentionRule::custom({1, 0, 1, 0, 1, 0,  //
                                                      1, 0, 1, 0, 1, 1}));
  q2.cache = cache.get();
  const auto want = forward1(*backend_, q2);
  EXPECT_LT(rel_error(got, want), 1e-6);
  const auto all =
      forward1(*backend_, request({ids_[5], ids_[6]}, {pos_[5], pos_[6]}, AttentionRule::causal()));
  EXPECT_GT(rel_error(got, all), 1e-4) << "hiding slots must change the result";
}

// Write-at-slots: recomputing chosen rows of a bidirectional canvas with unchanged tokens leaves
// their K/V as they were, so outputs equal the full forward; the length does not move.
TEST_F(ForwardContract, WriteAtSlotsRefreshesInPlace) {
  auto cache = backend_->create_cache(16);
  SequenceForward all = request(ids_, pos_, AttentionRule::bidirectional());
  all.cache = cache.get();
  all.write = CacheWrite::kAppend;
  const auto full = forward1(*backend_, all);
  EXPECT_EQ(cache->length(), 10);

  SequenceForward sel =
      request({ids_[7], ids_[2]}, {pos_[7], pos_[2]}, AttentionRule::bidirectional());
  sel.cache = cache.get();
  sel.write = CacheWrite::kAtSlots;
  sel.write_slots = {7, 2};
  const auto got = forward1(*backend_, sel);
  EXPECT_EQ(cache->length(), 10);
  EXPECT_LT(
      rel_error(std::span(got).subspan(0, vocab_), std::span(full).subspan(7 * vocab_, vocab_)),
      1e-5);
  EXPECT_LT(rel_error(std::span(got).subspan(vocab_, vocab_),
                      std::span(full).subspan(2 * vocab_, vocab_)),
            1e-5);

  // Changing the token at slot 7 changes what every later reader of the cache sees.
  SequenceForward probe = request({ids_[0]}, {pos_[0]}, AttentionRule::bidirectional());
  probe.cache = cache.get();
  const auto before = forward1(*backend_, probe);
  SequenceForward edit = request({42}, {7}, AttentionRule::bidirectional());
  edit.cache = cache.get();
  edit.write = CacheWrite::kAtSlots;
  edit.write_slots = {7};
  backend_->forward(std::span(&edit, 1));
  const auto after = forward1(*backend_, probe);
  EXPECT_GT(rel_error(after, before), 1e-4);
}

// Several sequences in one batch give the same rows as one at a time, to the bit: the CPU forward
// is batch invariant (its GEMM is, backend/cpu/gemm_f32.h; norms and attention work per row and
// per sequence).
TEST_F(ForwardContract, BatchEqualsSingles) {
  std::vector<SequenceForward> batch = {request(ids_, pos_, AttentionRule::block_causal(4)),
                                        request({7, 8, 9}, {20, 21, 22}, AttentionRule::causal()),
                                        request({1, 2}, {0, 1}, AttentionRule::bidirectional())};
  batch[0].output_rows = {9, 0};
  const auto together = backend_->forward(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto alone = forward1(*backend_, batch[i]);
    EXPECT_EQ(together[i].logits, alone) << i;
  }
  EXPECT_EQ(together[0].logits.size(), 2u * vocab_);
}

TEST_F(ForwardContract, InvalidRequestsAreRejectedBeforeAnyWrite) {
  auto cache = backend_->create_cache(4);
  auto bad = [&](SequenceForward f, const std::string& needle) {
    SequenceForward good = request({1, 2}, {0, 1}, AttentionRule::causal());
    good.cache = cache.get();
    good.write = CacheWrite::kAppend;
    std::vector<SequenceForward> batch = {good, std::move(f)};
    try {
      backend_->forward(batch);
      ADD_FAILURE() << "expected error: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(cache->length(), 0) << "the valid request in the batch must not have been applied";
  };
  bad(request({1, int32_t(vocab_)}, {0, 1}, AttentionRule::causal()), "outside the vocabulary");
  bad(request({1, 2}, {0}, AttentionRule::causal()), "positions for 2 tokens");
  bad(request({1, 2}, {0, -1}, AttentionRule::causal()), "negative");
  bad(request({}, {}, AttentionRule::causal()), "no query tokens");
  bad(request({1, 2}, {0, 1}, AttentionRule::custom({1, 0, 1})), "custom attention mask");
  auto f = request({1, 2}, {0, 1}, AttentionRule::causal());
  f.output_rows = {2};
  bad(f, "output row 2");
  f = request({1, 2}, {0, 1}, AttentionRule::causal());
  f.write = CacheWrite::kAppend;
  bad(f, "needs a cache");
  auto other = backend_->create_cache(4);
  f = request({1, 2}, {0, 1}, AttentionRule::causal());
  f.cache = other.get();
  f.visible_slots = std::vector<int32_t>{3};
  bad(f, "never written");
  f.visible_slots = std::vector<int32_t>{999};
  bad(f, "outside the cache");
  f.visible_slots.reset();
  f.write = CacheWrite::kAtSlots;
  f.write_slots = {1, 1};
  bad(f, "listed twice");
}

}  // namespace
}  // namespace dllm
