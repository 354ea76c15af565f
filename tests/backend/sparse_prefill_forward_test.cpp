// MMInference sparse prefill through the CPU backend's forward (SequenceForward::sparse_prefill)
// on the sdar-tiny fixture (400 tokens): a config whose every head runs one data-independent pattern (A-shape,
// tri-shape, grid) must give exactly the logits of the plain forward under the custom rule of
// that pattern's mask (plan_mask, checked bit for bit against the NumPy reference elsewhere);
// data-dependent patterns change the logits; forwards that are not a cold prefill, and dense
// layers, attend densely; bad requests fail with the field named.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "attention/sparse_prefill_patterns.h"
#include "backend/backend.h"
#include "core/error.h"
#include "support/rel_error.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using test::rel_error;

class SparsePrefillForward : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::model_fixture("sdar-tiny"));
    backend_ = make_cpu_backend(*model_);
    for (int i = 0; i < 400; ++i) ids_.push_back((i * 37 + 11) % 300);
  }
  SequenceForward request(AttentionRule rule) const {
    SequenceForward f;
    f.tokens = ids_;
    f.positions.resize(ids_.size());
    std::iota(f.positions.begin(), f.positions.end(), 0);
    f.rule = std::move(rule);
    f.want_logits = true;
    f.output_rows = f.positions;
    return f;
  }
  // Every head of every layer (from `first_layer`) runs `p`.
  std::shared_ptr<SparsePrefillRequest> everywhere(const HeadPattern& p,
                                                   int first_layer = 0) const {
    auto config = std::make_shared<SparsePrefillConfig>();
    const ModelConfig& c = model_->config();
    config->layers.resize(static_cast<size_t>(c.num_layers));
    for (int l = first_layer; l < c.num_layers; ++l) {
      auto& layer = config->layers[static_cast<size_t>(l)];
      layer.given = true;
      layer.heads.assign(static_cast<size_t>(c.num_heads), p);
      layer.head_given.assign(static_cast<size_t>(c.num_heads), true);
    }
    auto req = std::make_shared<SparsePrefillRequest>();
    req->config = config;
    return req;
  }
  std::vector<float> logits(const SequenceForward& f) {
    return backend_->forward(std::span(&f, 1))[0].logits;
  }
  // The plain forward under the custom rule of p's mask (one mask for every head and layer).
  std::vector<float> masked_reference(const HeadPattern& p, const PrefillLayout& layout) {
    SparsePrefillPlan plan;
    plan.n_tokens = layout.n_tokens;
    plan.block_size = layout.block_size;
    plan.heads.push_back(build_head_plan(p, layout, HeadQK{}));
    return logits(request(AttentionRule::custom(plan_mask(plan, 0))));
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  std::vector<int32_t> ids_;
};

TEST_F(SparsePrefillForward, DataIndependentPatternsEqualTheirMaskUnderTheCustomRule) {
  const int32_t n = static_cast<int32_t>(ids_.size());
  HeadPattern a;
  a.kind = PatternKind::kAShape;
  a.sink = 4;
  a.local = 20;
  HeadPattern tri = a;
  tri.kind = PatternKind::kTriShape;
  tri.n_last = 17;
  HeadPattern grid;
  grid.kind = PatternKind::kGrid;
  grid.grid = {9, 2, true, true, 12};
  for (int32_t block : {1, 4})
    for (const HeadPattern& p : {a, tri, grid}) {
      SCOPED_TRACE(to_string(p.kind) + " block " + std::to_string(block));
      PrefillLayout layout{n, block, {}, 10, 380, 0};
      SequenceForward f =
          request(block == 1 ? AttentionRule::causal() : AttentionRule::block_causal(block));
      auto req = everywhere(p);
      req->vision_begin = 10;
      req->vision_end = 380;
      f.sparse_prefill = req;
      const auto got = logits(f);
      EXPECT_LT(rel_error(got, masked_reference(p, layout)), 1e-5);
      EXPECT_GT(rel_error(got, logits(request(f.rule))), 1e-3)
          << "the pattern must change the logits";
    }
}

TEST_F(SparsePrefillForward, DenseLayersAndWarmForwardsAttendDensely) {
  HeadPattern vs;
  vs.kind = PatternKind::kVerticalSlash;
  vs.vertical = 30;
  vs.slash = 50;
  const int layers = static_cast<int>(model_->config().num_layers);
  SequenceForward f = request(AttentionRule::causal());
  const auto dense = logits(f);
  f.sparse_prefill = everywhere(vs, layers);  // no layer listed: all dense
  EXPECT_LT(rel_error(logits(f), dense), 1e-6);
  f.sparse_prefill = everywhere(vs, 1);  // layer 0 dense, the others VS
  EXPECT_GT(rel_error(logits(f), dense), 1e-4);
  // A prompt continuing a cached prefix is no cold prefill: dense.
  auto cache = backend_->create_cache(512);
  SequenceForward pre = request(AttentionRule::causal());
  pre.tokens.resize(50);
  pre.positions.resize(50);
  pre.output_rows.clear();
  pre.cache = cache.get();
  pre.write = CacheWrite::kAppend;
  backend_->forward(std::span(&pre, 1));
  SequenceForward rest = request(AttentionRule::causal());
  rest.tokens.erase(rest.tokens.begin(), rest.tokens.begin() + 50);
  rest.positions.erase(rest.positions.begin(), rest.positions.begin() + 50);
  rest.output_rows.resize(rest.tokens.size());
  std::iota(rest.output_rows.begin(), rest.output_rows.end(), 0);
  rest.cache = cache.get();
  const auto warm_dense = logits(rest);
  rest.sparse_prefill = everywhere(vs, 0);
  EXPECT_LT(rel_error(logits(rest), warm_dense), 1e-6);
}

TEST_F(SparsePrefillForward, BadRequestsNameTheField) {
  HeadPattern a;
  a.kind = PatternKind::kAShape;
  SequenceForward f = request(AttentionRule::bidirectional());
  f.sparse_prefill = everywhere(a);
  EXPECT_THROW(logits(f), Error);
  f = request(AttentionRule::causal());
  auto req = everywhere(a);
  req->modality.assign(3, 0);
  f.sparse_prefill = req;
  try {
    logits(f);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 modalities for 400 tokens"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dllm
