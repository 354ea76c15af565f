// Selected-row ("write-at-slots") forwards over a whole cached canvas and the head-averaged
// attention rows d2Cache's rollout reads (method-specs §4.3, §4.5), on the full-diffusion
// fixtures (LLaDA: no biases; Dream: q/k/v biases).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "decode/d2cache_selection.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

SequenceForward canvas_request(const std::vector<int32_t>& ids, const std::vector<int32_t>& rows) {
  SequenceForward f;
  for (int32_t r : rows) {
    f.tokens.push_back(ids[static_cast<size_t>(r)]);
    f.positions.push_back(r);
  }
  f.rule = AttentionRule::bidirectional();
  f.want_logits = true;
  f.want_attention_rows = true;
  f.output_rows.resize(rows.size());
  std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
  return f;
}

std::vector<int32_t> iota_rows(size_t n) {
  std::vector<int32_t> r(n);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

class AttentionRows : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = Model::load(test::model_fixture(GetParam()));
    backend_ = make_cpu_backend(*model_);
    vocab_ = model_->config().vocab_size;
    layers_ = model_->config().num_layers;
    const int32_t mask = static_cast<int32_t>(model_->config().mask_token_id);
    ids_ = {3, 99, 17, 250, 5, mask, mask, 8, mask, mask, mask, 41, mask, mask};
  }
  SequenceResult run(const SequenceForward& f) { return backend_->forward(std::span(&f, 1))[0]; }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  int64_t vocab_ = 0, layers_ = 0;
  std::vector<int32_t> ids_;
};

// Every row of every layer is a probability distribution over the canvas.
TEST_P(AttentionRows, RowsAreHeadAveragedDistributions) {
  const auto r = run(canvas_request(ids_, iota_rows(ids_.size())));
  const int64_t n = static_cast<int64_t>(ids_.size());
  ASSERT_EQ(r.attention_width, n);
  ASSERT_EQ(r.attention_rows.size(), size_t(layers_ * n * n));
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float p = r.attention_rows[size_t((l * n + i) * n + j)];
        EXPECT_GT(p, 0.0f);
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << "layer " << l << " row " << i;
    }
}

// Selecting every row (write-at-slots into a fresh cache, in canvas order) is the full forward.
TEST_P(AttentionRows, AllRowsSelectedEqualsFullForward) {
  const auto rows = iota_rows(ids_.size());
  const auto full = run(canvas_request(ids_, rows));
  auto cache = backend_->create_cache(int64_t(ids_.size()));
  SequenceForward sel = canvas_request(ids_, rows);
  sel.cache = cache.get();
  sel.write = CacheWrite::kAtSlots;
  sel.write_slots = rows;
  const auto got = run(sel);
  EXPECT_EQ(got.logits, full.logits);
  EXPECT_EQ(got.attention_rows, full.attention_rows);
}

// After a step-0 forward that fills the cache, forwarding a subset of rows (unchanged tokens,
// any order) against the cached canvas gives the full forward's logits and attention rows.
TEST_P(AttentionRows, SubsetAfterFullForwardEqualsFullRows) {
  const int64_t n = static_cast<int64_t>(ids_.size());
  auto cache = backend_->create_cache(n);
  SequenceForward step0 = canvas_request(ids_, iota_rows(ids_.size()));
  step0.cache = cache.get();
  step0.write = CacheWrite::kAppend;
  const auto full = run(step0);
  ASSERT_EQ(cache->length(), n);

  const std::vector<int32_t> subset = {9, 0, 6, 12, 3};
  SequenceForward sel = canvas_request(ids_, subset);
  sel.cache = cache.get();
  sel.write = CacheWrite::kAtSlots;
  sel.write_slots = subset;
  const auto got = run(sel);
  ASSERT_EQ(got.attention_width, n);
  const int64_t m = static_cast<int64_t>(subset.size());
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = subset[size_t(i)];
    EXPECT_LT(max_abs_diff(std::span(got.logits).subspan(size_t(i * vocab_), size_t(vocab_)),
                           std::span(full.logits).subspan(size_t(r * vocab_), size_t(vocab_))),
              1e-4);
    for (int64_t l = 0; l < layers_; ++l)
      EXPECT_LT(
          max_abs_diff(std::span(got.attention_rows).subspan(size_t((l * m + i) * n), size_t(n)),
                       std::span(full.attention_rows).subspan(size_t((l * n + r) * n), size_t(n))),
          1e-6)
          << "layer " << l << " row " << r;
  }
}

// Stale cache semantics (d2Cache): a token changed at a slot that is not forwarded keeps its old
// K/V, so a selected row differs from the full forward of the new canvas.
TEST_P(AttentionRows, UnselectedSlotsKeepStaleKeys) {
  const int64_t n = static_cast<int64_t>(ids_.size());
  auto cache = backend_->create_cache(n);
  SequenceForward step0 = canvas_request(ids_, iota_rows(ids_.size()));
  step0.cache = cache.get();
  step0.write = CacheWrite::kAppend;
  run(step0);

  std::vector<int32_t> changed = ids_;
  changed[6] = 77;
  const auto fresh = run(canvas_request(changed, iota_rows(changed.size())));
  SequenceForward stale = canvas_request(changed, {9});
  stale.cache = cache.get();
  stale.write = CacheWrite::kAtSlots;
  stale.write_slots = {9};
  const auto a = run(stale);
  EXPECT_GT(
      max_abs_diff(a.logits, std::span(fresh.logits).subspan(size_t(9 * vocab_), size_t(vocab_))),
      1e-4);
}

// want_attention_rollout: the backend's importance is d2cache::rollout_importance of the rows of
// the same forward, with each query at its slot; the rows themselves are not returned unless asked.
TEST_P(AttentionRows, RolloutIsTheReverseVectorProductOfTheRows) {
  const int32_t n = static_cast<int32_t>(ids_.size());
  auto cache = backend_->create_cache(n);
  SequenceForward first = canvas_request(ids_, iota_rows(ids_.size()));
  first.cache = cache.get();
  first.write = CacheWrite::kAppend;
  first.want_attention_rollout = true;
  const auto r0 = run(first);
  EXPECT_EQ(r0.attention_importance,
            d2cache::rollout_importance(r0.attention_rows, layers_, iota_rows(ids_.size()),
                                        r0.attention_width));
  const std::vector<int32_t> rows = {9, 1, 5, 11};
  SequenceForward step = canvas_request(ids_, rows);
  step.cache = cache.get();
  step.write = CacheWrite::kAtSlots;
  step.write_slots = rows;
  step.want_attention_rows = false;
  step.want_attention_rollout = true;
  const auto r1 = run(step);
  EXPECT_TRUE(r1.attention_rows.empty());
  ASSERT_EQ(r1.attention_importance.size(), static_cast<size_t>(n));
  step.want_attention_rows = true;
  const auto r2 = run(step);
  EXPECT_EQ(r1.attention_importance,
            d2cache::rollout_importance(r2.attention_rows, layers_, rows, r2.attention_width));
}

INSTANTIATE_TEST_SUITE_P(FullDiffusion, AttentionRows,
                         ::testing::Values("llada-tiny", "dream-tiny"), [](const auto& info) {
                           return info.param == "llada-tiny" ? std::string("llada")
                                                             : std::string("dream");
                         });

}  // namespace
}  // namespace dllm
