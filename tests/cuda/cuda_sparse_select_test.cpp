// The GPU's sparse-attention selection kernels (backend/cuda/sparse_select.h) against the CPU
// reference (backend/cpu/sparse_select.h, itself checked against NumPy): MAGE's score-sum from
// the prefix-only log-sum-exp (and that log-sum-exp itself), and the per-KV-head top-k with ties
// to the lower index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "attention/sparse_attention.h"
#include "backend/cpu/sparse_select.h"
#include "backend/cuda/sparse_select.h"
#include "cuda_test_util.h"

namespace dllm {
namespace {

TEST(CudaSparseSelect, ScoreSumMatchesCpuReference) {
  std::mt19937 rng(21);
  struct Shape {
    int rows, heads, kv_heads, head_dim, n_prefix, select;
  };
  // Every head_dim the kernels take; 16 (the embedded models) at the most rows a block holds
  // (R = 256: 16 warps) over three 1024-key blocks with a ragged end, and at GQA 1.
  for (const Shape s :
       {Shape{32, 8, 2, 128, 1000, 0}, Shape{16, 7, 1, 64, 333, 3}, Shape{4, 4, 4, 32, 70, 0},
        Shape{32, 8, 1, 16, 2100, 0}, Shape{8, 4, 4, 16, 77, 2}, Shape{8, 4, 2, 256, 300, 0}}) {
    SCOPED_TRACE("head_dim " + std::to_string(s.head_dim) + " n_prefix " +
                 std::to_string(s.n_prefix));
    const int group = s.heads / s.kv_heads, qd = s.heads * s.head_dim,
              kvd = s.kv_heads * s.head_dim, pool = s.n_prefix + 50;
    auto q = test::random_floats(size_t(s.rows) * qd, rng);
    auto kc = test::random_floats(size_t(pool) * kvd, rng, 1.5f);
    const auto qb = test::round_bf16(q), kb = test::round_bf16(kc);
    // The prefix's keys scattered over the pool, as pages would place them.
    std::vector<int32_t> slots(static_cast<size_t>(pool));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(size_t(s.n_prefix));
    const std::vector<int32_t> rows = selection_query_rows(s.rows, s.select);
    const float scale = 1.0f / std::sqrt(float(s.head_dim));
    // The prefix-only LSE the exact pass would export, in double on the host.
    std::vector<float> lse(size_t(s.rows) * s.heads);
    for (int r = 0; r < s.rows; ++r)
      for (int hq = 0; hq < s.heads; ++hq) {
        const int h = hq / group;
        std::vector<double> sc;
        for (int j = 0; j < s.n_prefix; ++j) {
          double d = 0;
          for (int i = 0; i < s.head_dim; ++i)
            d += double(q[size_t(r) * qd + hq * s.head_dim + i]) *
                 kc[size_t(slots[size_t(j)]) * kvd + h * s.head_dim + i];
          sc.push_back(d * scale);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double v : sc) z += std::exp(v - mx);
        lse[size_t(r) * s.heads + hq] = float(mx + std::log(z));
      }
    auto dq = test::to_device(qb), dk = test::to_device(kb);
    auto dlse = test::to_device(lse);
    auto dslots = test::to_device(slots), drows = test::to_device(rows);
    cuda::DeviceBuffer<float> dscores(size_t(s.kv_heads) * s.n_prefix, "scores");
    cuda::ScoreSumParams p;
    p.q = reinterpret_cast<const cuda::bf16*>(dq.get());
    p.lse = dlse.get();
    p.k_cache = reinterpret_cast<const cuda::bf16*>(dk.get());
    p.prefix_slots = dslots.get();
    p.rows_used = drows.get();
    p.scores = dscores.get();
    p.n_rows_used = int(rows.size());
    p.n_prefix = s.n_prefix;
    p.heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.scale = scale;
    cuda::mage_score_sum(p, nullptr);
    const auto got = test::to_host(dscores);
    for (int h = 0; h < s.kv_heads; ++h) {
      std::vector<const float*> keys;
      for (int j = 0; j < s.n_prefix; ++j)
        keys.push_back(kc.data() + size_t(slots[size_t(j)]) * kvd + h * s.head_dim);
      const auto want =
          cpu::mean_attention_scores(q.data() + h * group * s.head_dim, qd, rows, group, s.head_dim,
                                     keys, s.n_prefix, s.n_prefix, {}, 0, scale);
      double sum = 0;
      for (int j = 0; j < s.n_prefix; ++j) {
        EXPECT_NEAR(got[size_t(h) * s.n_prefix + j], want[size_t(j)], 1e-4 * want[size_t(j)] + 1e-9)
            << "kv head " << h << " key " << j;
        sum += got[size_t(h) * s.n_prefix + j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-3) << "a mean of distributions over the prefix";
    }
    // The prefix-only LSE on the device (what the forward's selection computes) against the
    // host's double: the used rows get it, the others are left alone.
    const float untouched = -12345.0f;
    cuda::DeviceBuffer<float> dlse_gpu(lse.size(), "lse");
    const std::vector<float> fill(lse.size(), untouched);
    DLLM_CUDA_CHECK(cudaMemcpy(dlse_gpu.get(), fill.data(), fill.size() * sizeof(float),
                               cudaMemcpyHostToDevice));
    cuda::DeviceBuffer<float> ws(cuda::prefix_lse_workspace_floats(s.n_prefix, int(rows.size()),
                                                                    s.heads, s.kv_heads),
                                 "lse workspace");
    cuda::mage_prefix_lse(p, dlse_gpu.get(), ws.get(), nullptr);
    const auto lse_gpu = test::to_host(dlse_gpu);
    for (int r = 0; r < s.rows; ++r) {
      const bool used = std::find(rows.begin(), rows.end(), r) != rows.end();
      for (int hq = 0; hq < s.heads; ++hq) {
        const size_t i = size_t(r) * s.heads + hq;
        if (used)
          EXPECT_NEAR(lse_gpu[i], lse[i], 2e-4 * std::max(1.0f, std::abs(lse[i])))
              << "row " << r << " head " << hq;
        else
          EXPECT_EQ(lse_gpu[i], untouched);
      }
    }
  }
}

// A head_dim the kernels have no instance for is refused by name and range, before any launch.
TEST(CudaSparseSelect, UnsupportedHeadDimIsAClearError) {
  cuda::ScoreSumParams p;
  p.n_rows_used = 4;
  p.n_prefix = 100;
  p.heads = 4;
  p.kv_heads = 2;
  p.head_dim = 48;
  for (int which = 0; which < 2; ++which) {
    try {
      if (which == 0)
        cuda::mage_score_sum(p, nullptr);
      else
        cuda::mage_prefix_lse(p, nullptr, nullptr, nullptr);
      ADD_FAILURE() << "head_dim 48 was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("head_dim must be 16, 32, 64, 128 or 256 (got 48)"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(CudaSparseSelect, TopKMatchesCpuIncludingTies) {
  std::mt19937 rng(5);
  for (const auto [n, k, heads] :
       {std::tuple{131072, 1024, 2}, std::tuple{5000, 37, 3}, std::tuple{2048, 2047, 1}}) {
    SCOPED_TRACE(n);
    auto scores = test::random_floats(size_t(n) * heads, rng);
    // Ties (repeated values, also straddling the k-th) and negative scores (Quest's bound).
    for (size_t i = 0; i < scores.size(); i += 7) scores[i] = scores[i / 7 * 7 / 2];
    for (size_t i = 3; i < scores.size(); i += 11) scores[i] = 0.25f;
    auto d = test::to_device(scores);
    cuda::DeviceBuffer<int32_t> out(size_t(k) * heads, "top-k");
    cuda::sparse_top_k(d.get(), n, k, heads, out.get(), nullptr);
    const auto got = test::to_host(out);
    for (int h = 0; h < heads; ++h) {
      std::vector<double> sd(scores.begin() + size_t(h) * n, scores.begin() + size_t(h + 1) * n);
      const auto want = top_k_indices(sd, k);
      EXPECT_EQ(std::vector<int32_t>(got.begin() + size_t(h) * k, got.begin() + size_t(h + 1) * k),
                want)
          << "kv head " << h;
    }
  }
}

}  // namespace
}  // namespace dllm
