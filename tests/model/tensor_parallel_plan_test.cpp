// The tensor-parallel plan against the math it must preserve: an attention block and a SwiGLU FFN
// computed by every rank on its slices of random weights, the partial outputs summed (the
// all-reduce), equal the unsharded block; vocabulary ranges tile the vocabulary; shapes a group
// cannot split are errors naming the config field.
#include "model/tensor_parallel_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"

namespace dllm {
namespace {

// A row-major [rows, cols] matrix of fresh random values.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  float at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

Matrix random_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.3f);
  Matrix m{rows, cols, std::vector<float>(static_cast<size_t>(rows * cols))};
  for (float& x : m.v) x = d(rng);
  return m;
}

// y = x W^T over W's rows [rows.begin, rows.end()) and columns [cols.begin, cols.end()) — the
// columns pick which features of x (x holds cols.count of them) meet which weight columns.
std::vector<float> project(const std::vector<float>& x, int64_t tokens, const Matrix& w,
                           IdRange rows, IdRange cols) {
  std::vector<float> y(static_cast<size_t>(tokens * rows.count));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows.count; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols.count; ++c)
        s += double(x[static_cast<size_t>(t * cols.count + c)]) *
             w.at(rows.begin + r, cols.begin + c);
      y[static_cast<size_t>(t * rows.count + r)] = static_cast<float>(s);
    }
  return y;
}

struct AttentionWeights {
  AttentionDesc desc;
  int64_t hidden = 0;
  Matrix q, k, v, o;
};

// Causal attention of `shard`'s query heads (q / k / v already projected to the shard's heads),
// then its slice of the o projection: the rank's partial output.
std::vector<float> attention_partial(const AttentionWeights& w, const AttentionShard& shard,
                                     const std::vector<float>& x, int64_t tokens) {
  const int64_t hd = w.desc.head_dim, group = w.desc.heads / w.desc.kv_heads;
  const IdRange all_hidden{0, w.hidden};
  const auto q = project(x, tokens, w.q, q_rows(shard, hd), all_hidden);
  const auto k = project(x, tokens, w.k, kv_rows(shard, hd), all_hidden);
  const auto v = project(x, tokens, w.v, kv_rows(shard, hd), all_hidden);
  const int64_t qw = shard.heads.count * hd, kw = shard.kv_heads.count * hd;
  std::vector<float> attn(static_cast<size_t>(tokens * qw));
  for (int64_t h = 0; h < shard.heads.count; ++h) {
    const int64_t kv = (shard.heads.begin + h) / group - shard.kv_heads.begin;  // local KV head
    EXPECT_TRUE(kv >= 0 && kv < shard.kv_heads.count) << "query head's KV head not held";
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<double> s(static_cast<size_t>(t + 1));
      double mx = -INFINITY;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d)
          dot += double(q[static_cast<size_t>(t * qw + h * hd + d)]) *
                 k[static_cast<size_t>(j * kw + kv * hd + d)];
        s[static_cast<size_t>(j)] = dot / std::sqrt(double(hd));
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double z = 0;
      for (double& e : s) z += e = std::exp(e - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double o = 0;
        for (int64_t j = 0; j <= t; ++j)
          o += s[static_cast<size_t>(j)] / z * v[static_cast<size_t>(j * kw + kv * hd + d)];
        attn[static_cast<size_t>(t * qw + h * hd + d)] = static_cast<float>(o);
      }
    }
  }
  return project(attn, tokens, w.o, {0, w.hidden}, q_rows(shard, hd));
}

// down(silu(gate x) * up x) over the features `features`: the rank's partial output.
std::vector<float> swiglu_partial(const Matrix& gate, const Matrix& up, const Matrix& down,
                                  IdRange features, const std::vector<float>& x, int64_t tokens) {
  const IdRange all_hidden{0, gate.cols};
  auto g = project(x, tokens, gate, features, all_hidden);
  const auto u = project(x, tokens, up, features, all_hidden);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  return project(g, tokens, down, {0, down.rows}, features);
}

void add_into(std::vector<float>& sum, const std::vector<float>& part) {
  if (sum.empty()) sum.assign(part.size(), 0.0f);
  for (size_t i = 0; i < part.size(); ++i) sum[i] += part[i];
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << "element " << i;
}

LayerDesc dense_layer(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t inter) {
  LayerDesc d;
  d.attention.heads = heads;
  d.attention.kv_heads = kv_heads;
  d.attention.head_dim = head_dim;
  d.intermediate_size = inter;
  return d;
}

TEST(TensorParallelPlan, ShardedAttentionSumsToTheWholeBlock) {
  std::mt19937 rng(27);
  constexpr int64_t kHidden = 24, kHeadDim = 4, kTokens = 5;
  struct Shape {
    int64_t heads, kv_heads;
    std::vector<int> worlds;
  };
  // GQA split, GQA replicated (fewer KV heads than ranks), full multi-head.
  for (const Shape& shape :
       {Shape{8, 2, {1, 2, 4, 8}}, Shape{12, 4, {2, 4}}, Shape{6, 6, {2, 3, 6}}}) {
    AttentionWeights w;
    w.desc = dense_layer(shape.heads, shape.kv_heads, kHeadDim, 24).attention;
    w.hidden = kHidden;
    w.q = random_matrix(shape.heads * kHeadDim, kHidden, rng);
    w.k = random_matrix(shape.kv_heads * kHeadDim, kHidden, rng);
    w.v = random_matrix(shape.kv_heads * kHeadDim, kHidden, rng);
    w.o = random_matrix(kHidden, shape.heads * kHeadDim, rng);
    const Matrix x = random_matrix(kTokens, kHidden, rng);
    const AttentionShard whole{{0, shape.heads}, {0, shape.kv_heads}};
    const auto want = attention_partial(w, whole, x.v, kTokens);
    for (int world : shape.worlds) {
      SCOPED_TRACE(std::to_string(shape.heads) + "/" + std::to_string(shape.kv_heads) +
                   " heads at tensor parallel " + std::to_string(world));
      std::vector<float> sum;
      for (int rank = 0; rank < world; ++rank) {
        const auto plan = plan_tensor_parallel(
            {dense_layer(shape.heads, shape.kv_heads, kHeadDim, 24)}, 100, rank, world);
        add_into(sum, attention_partial(w, plan.layers[0].attention, x.v, kTokens));
      }
      expect_near_all(sum, want);
    }
  }
}

TEST(TensorParallelPlan, ShardedSwiGluSumsToTheWholeFfnDenseAndMoe) {
  std::mt19937 rng(28);
  constexpr int64_t kHidden = 16, kTokens = 3, kInter = 24;
  const Matrix gate = random_matrix(kInter, kHidden, rng), up = random_matrix(kInter, kHidden, rng);
  const Matrix down = random_matrix(kHidden, kInter, rng), x = random_matrix(kTokens, kHidden, rng);
  const auto want = swiglu_partial(gate, up, down, {0, kInter}, x.v, kTokens);
  LayerDesc moe = dense_layer(4, 4, 4, 0);
  moe.ffn = FfnKind::kMoeSwiGlu;
  moe.moe.num_experts = 8;
  moe.moe.expert_intermediate_size = kInter;
  moe.moe.num_shared_experts = 1;
  for (int world : {1, 2, 4}) {
    std::vector<float> dense_sum, expert_sum;
    for (int rank = 0; rank < world; ++rank) {
      const auto plan = plan_tensor_parallel({dense_layer(4, 4, 4, kInter), moe}, 100, rank, world);
      add_into(dense_sum,
               swiglu_partial(gate, up, down, plan.layers[0].ffn_features, x.v, kTokens));
      add_into(expert_sum,
               swiglu_partial(gate, up, down, plan.layers[1].expert_features, x.v, kTokens));
      EXPECT_EQ(plan.layers[1].shared_features.count, kInter / world);
    }
    expect_near_all(dense_sum, want);
    expect_near_all(expert_sum, want);
  }
}

TEST(TensorParallelPlan, ExpertParallelRanksTileTheExpertsWhole) {
  LayerDesc moe = dense_layer(4, 4, 4, 0);
  moe.ffn = FfnKind::kMoeSwiGlu;
  moe.moe.num_experts = 8;
  moe.moe.expert_intermediate_size = 24;
  moe.moe.num_shared_experts = 1;
  for (int world : {1, 2, 4}) {
    int64_t next = 0;
    for (int rank = 0; rank < world; ++rank) {
      const LayerShard s =
          plan_tensor_parallel({moe}, 100, rank, world, MoeSplit::kExperts).layers[0];
      EXPECT_EQ(s.experts.begin, next);
      EXPECT_EQ(s.experts.count, 8 / world);
      next = s.experts.end();
      EXPECT_EQ(s.expert_features.begin, 0);
      EXPECT_EQ(s.expert_features.count, 24) << "whole experts";
      EXPECT_EQ(s.shared_features.count, 24 / world) << "the shared expert splits by feature";
    }
    EXPECT_EQ(next, 8);
  }
  // Split inside the experts, every rank holds every expert.
  const LayerShard s = plan_tensor_parallel({moe}, 100, 1, 2).layers[0];
  EXPECT_EQ(s.experts.begin, 0);
  EXPECT_EQ(s.experts.count, 8);
}

TEST(TensorParallelPlan, FusedQkvRowsAreTheSeparateProjectionsRows) {
  LayerDesc d = dense_layer(8, 2, 4, 8);
  d.attention.fused_qkv = true;
  const int64_t hd = 4, k_at = 8 * hd, v_at = k_at + 2 * hd;
  for (int world : {2, 4, 8})
    for (int rank = 0; rank < world; ++rank) {
      const AttentionShard s = plan_tensor_parallel({d}, 100, rank, world).layers[0].attention;
      const auto rows = fused_qkv_rows(s, d.attention);
      ASSERT_EQ(rows.size(), 3u);
      EXPECT_EQ(rows[0].begin, q_rows(s, hd).begin);
      EXPECT_EQ(rows[0].count, 8 / world * hd);
      EXPECT_EQ(rows[1].begin, k_at + kv_rows(s, hd).begin);
      EXPECT_EQ(rows[2].begin, v_at + kv_rows(s, hd).begin);
      EXPECT_EQ(rows[1].count, kv_rows(s, hd).count);
    }
}

TEST(TensorParallelPlan, VocabularyRangesTileTheVocabulary) {
  for (int64_t vocab : {9, 997, 151936}) {
    for (int world : {1, 2, 4, 8, 9}) {
      if (vocab < world) continue;
      int64_t next = 0, smallest = vocab, largest = 0;
      for (int rank = 0; rank < world; ++rank) {
        const IdRange r = plan_tensor_parallel({}, vocab, rank, world).vocab;
        EXPECT_EQ(r.begin, next);
        next = r.end();
        smallest = std::min(smallest, r.count);
        largest = std::max(largest, r.count);
      }
      EXPECT_EQ(next, vocab);
      EXPECT_GE(smallest, 1);
      EXPECT_LE(largest - smallest, 1);
    }
  }
}

void expect_error_naming(const std::vector<LayerDesc>& layers, int64_t vocab, int world,
                         const std::string& field, MoeSplit split = MoeSplit::kExpertFeatures) {
  try {
    plan_tensor_parallel(layers, vocab, 0, world, split);
    ADD_FAILURE() << "no error for " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(TensorParallelPlan, ShapesAGroupCannotSplitAreErrorsNamingTheField) {
  expect_error_naming({dense_layer(8, 2, 4, 8)}, 100, 3, "num_attention_heads");
  expect_error_naming({dense_layer(12, 3, 4, 8)}, 100, 2, "num_key_value_heads");
  expect_error_naming({dense_layer(8, 8, 4, 12)}, 100, 8, "intermediate_size");
  expect_error_naming({}, 3, 4, "vocab_size");
  expect_error_naming({}, 100, 0, "--tensor-parallel");
  LayerDesc moe = dense_layer(8, 8, 4, 0);
  moe.ffn = FfnKind::kMoeSwiGlu;
  moe.moe.expert_intermediate_size = 6;
  expect_error_naming({moe}, 100, 4, "moe_intermediate_size");
  moe.moe.num_experts = 6;
  expect_error_naming({moe}, 100, 4, "num_experts", MoeSplit::kExperts);
}

}  // namespace
}  // namespace dllm
