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

// A prefix of n keys over shuffled pages of 16 slots in a pool with spare pages, as the KV pool
// places them: the page table (what the kernels read) and each key's slot (what the CPU reads).
struct PagedPrefix {
  std::vector<int32_t> pages, slots;
  int pool_slots = 0;
};
constexpr int kTestPageShift = 4;
PagedPrefix paged_prefix(int n, int spare_pages, std::mt19937& rng) {
  constexpr int page = 1 << kTestPageShift;
  const int used = (n + page - 1) / page;
  std::vector<int32_t> all(static_cast<size_t>(used + spare_pages));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  PagedPrefix p;
  p.pages.assign(all.begin(), all.begin() + used);
  for (int j = 0; j < n; ++j) p.slots.push_back(p.pages[size_t(j / page)] * page + j % page);
  p.pool_slots = static_cast<int>(all.size()) * page;
  return p;
}

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
              kvd = s.kv_heads * s.head_dim;
    const PagedPrefix prefix = paged_prefix(s.n_prefix, 3, rng);
    const std::vector<int32_t>& slots = prefix.slots;
    auto q = test::random_floats(size_t(s.rows) * qd, rng);
    auto kc = test::random_floats(size_t(prefix.pool_slots) * kvd, rng, 1.5f);
    const auto qb = test::round_bf16(q), kb = test::round_bf16(kc);
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
    auto dpages = test::to_device(prefix.pages), drows = test::to_device(rows);
    cuda::DeviceBuffer<float> dscores(size_t(s.kv_heads) * s.n_prefix, "scores");
    cuda::ScoreSumParams p;
    p.q = reinterpret_cast<const cuda::bf16*>(dq.get());
    p.lse = dlse.get();
    p.k_cache = reinterpret_cast<const cuda::bf16*>(dk.get());
    p.prefix = {dpages.get(), kTestPageShift};
    p.rows_used = drows.get();
    p.scores = dscores.get();
    p.n_rows_used = int(rows.size());
    p.n_prefix = s.n_prefix;
    p.heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.scale = scale;
    // The exact attention's hand-over of the same LSE: (m, l) per split of the prefix and query
    // row r * G + g ([splits, kv_heads, rows * G, 2]), the last split empty (m = -inf, l = 0:
    // a split past the prefix).
    const int splits = 4, split_keys = (s.n_prefix + splits - 2) / (splits - 1);
    std::vector<float> ml(size_t(splits) * s.kv_heads * s.rows * group * 2);
    for (int c = 0; c < splits; ++c)
      for (int r = 0; r < s.rows; ++r)
        for (int hq = 0; hq < s.heads; ++hq) {
          const int h = hq / group;
          double m = -INFINITY, l = 0;
          for (int j = c * split_keys; j < std::min(s.n_prefix, (c + 1) * split_keys); ++j) {
            double d = 0;
            for (int i = 0; i < s.head_dim; ++i)
              d += double(q[size_t(r) * qd + hq * s.head_dim + i]) *
                   kc[size_t(slots[size_t(j)]) * kvd + h * s.head_dim + i];
            const double x = d * scale, mn = std::max(m, x);
            l = l * std::exp(m - mn) + std::exp(x - mn);
            m = mn;
          }
          const size_t at =
              ((size_t(c) * s.kv_heads + h) * s.rows * group + r * group + hq % group) * 2;
          ml[at] = float(m);
          ml[at + 1] = float(l);
        }
    auto dml = test::to_device(ml);
    // The hand-over merged into each row's lse on the device (as the forward does).
    cuda::DeviceBuffer<float> dlse_merged(lse.size(), "merged lse");
    cuda::mage_prefix_lse_from_attention(p, dml.get(), splits, s.rows, dlse_merged.get(), nullptr);
    for (const bool handed_over : {false, true})
      for (const int rows_per_warp : {16, 32}) {
        std::vector<float> whole_blocks;  // the sums with 1024-key blocks
        for (const int block_keys : {1024, 192, 0}) {
          SCOPED_TRACE(std::string(handed_over ? "hand-over" : "lse") + ", rows per warp " +
                       std::to_string(rows_per_warp) + ", block keys " +
                       std::to_string(block_keys));
          cuda::ScoreSumParams ps = p;
          ps.rows_per_warp = rows_per_warp;
          ps.block_keys = block_keys;
          if (handed_over) ps.lse = dlse_merged.get();
          DLLM_CUDA_CHECK(cudaMemset(dscores.get(), 0xff, dscores.size() * sizeof(float)));
          cuda::mage_score_sum(ps, nullptr);
          const auto got = test::to_host(dscores);
          if (whole_blocks.empty()) whole_blocks = got;
          EXPECT_EQ(got, whole_blocks) << "the sums depend on how the keys split over blocks";
          for (int h = 0; h < s.kv_heads; ++h) {
            std::vector<const float*> keys;
            for (int j = 0; j < s.n_prefix; ++j)
              keys.push_back(kc.data() + size_t(slots[size_t(j)]) * kvd + h * s.head_dim);
            const auto want =
                cpu::mean_attention_scores(q.data() + h * group * s.head_dim, qd, rows, group,
                                           s.head_dim, keys, s.n_prefix, s.n_prefix, {}, 0, scale);
            double sum = 0;
            for (int j = 0; j < s.n_prefix; ++j) {
              EXPECT_NEAR(got[size_t(h) * s.n_prefix + j], want[size_t(j)],
                          1e-4 * want[size_t(j)] + 1e-9)
                  << "kv head " << h << " key " << j;
              sum += got[size_t(h) * s.n_prefix + j];
            }
            EXPECT_NEAR(sum, 1.0, 1e-3) << "a mean of distributions over the prefix";
          }
        }
      }
    // The prefix-only LSE on the device (what the forward's selection computes) against the
    // host's double: the used rows get it, the others are left alone.
    const float untouched = -12345.0f;
    cuda::DeviceBuffer<float> dlse_gpu(lse.size(), "lse");
    const std::vector<float> fill(lse.size(), untouched);
    DLLM_CUDA_CHECK(cudaMemcpy(dlse_gpu.get(), fill.data(), fill.size() * sizeof(float),
                               cudaMemcpyHostToDevice));
    cuda::DeviceBuffer<float> ws(
        cuda::prefix_lse_workspace_floats(s.n_prefix, int(rows.size()), s.heads, s.kv_heads),
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

// The multi-block radix select (three histogram passes over chunks of 4096 scores, counts,
// ordered writes) against top_k_indices on fresh random scores: one chunk and many, ragged ends,
// k near n, ties (repeated values, also straddling the k-th, across chunk borders), negative
// scores (Quest's bound), softmax-like scores sharing their top bits, and every score equal.
TEST(CudaSparseSelect, TopKMatchesCpuIncludingTies) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  struct Case {
    int n, k, heads;
    const char* kind;
  };
  for (const Case c :
       {Case{131072, 1024, 2, "ties"}, Case{5000, 37, 3, "ties"}, Case{2048, 2047, 1, "ties"},
        Case{32768, 1024, 8, "softmax"}, Case{12289, 4096, 2, "softmax"},
        Case{4096, 100, 1, "ties"}, Case{9000, 3000, 2, "equal"}, Case{20000, 512, 3, "coarse"},
        Case{333, 16, 2, "ties"}}) {
    SCOPED_TRACE(std::string(c.kind) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k));
    const size_t total = size_t(c.n) * c.heads;
    std::vector<float> scores;
    if (std::string(c.kind) == "softmax") {  // exp of normal logits over their sum: one octave band
      std::normal_distribution<float> z(0.0f, 1.5f);
      for (size_t i = 0; i < total; ++i) scores.push_back(std::exp(z(rng)) * 1e-5f);
    } else if (std::string(c.kind) == "equal") {
      scores.assign(total, 0.125f);
    } else if (std::string(c.kind) == "coarse") {  // a few distinct values: ties everywhere
      std::uniform_int_distribution<int> v(-3, 4);
      for (size_t i = 0; i < total; ++i) scores.push_back(float(v(rng)) * 0.5f);
    } else {
      scores = test::random_floats(total, rng);
      for (size_t i = 0; i < scores.size(); i += 7) scores[i] = scores[i / 7 * 7 / 2];
      for (size_t i = 3; i < scores.size(); i += 11) scores[i] = 0.25f;
    }
    auto d = test::to_device(scores);
    cuda::DeviceBuffer<int32_t> out(size_t(c.k) * c.heads, "top-k");
    cuda::DeviceBuffer<int32_t> ws(cuda::top_k_workspace_ints(c.n, c.heads), "top-k workspace");
    // Twice: the workspace is cleared by each call (a stale count would show the second time).
    for (int run = 0; run < 2; ++run) {
      DLLM_CUDA_CHECK(cudaMemset(out.get(), 0xff, out.size() * sizeof(int32_t)));
      cuda::sparse_top_k(d.get(), c.n, c.k, c.heads, out.get(), ws.get(), nullptr);
      const auto got = test::to_host(out);
      for (int h = 0; h < c.heads; ++h) {
        std::vector<double> sd(scores.begin() + size_t(h) * c.n,
                               scores.begin() + size_t(h + 1) * c.n);
        const auto want = top_k_indices(sd, c.k);
        EXPECT_EQ(
            std::vector<int32_t>(got.begin() + size_t(h) * c.k, got.begin() + size_t(h + 1) * c.k),
            want)
            << "kv head " << h << " run " << run;
      }
    }
  }
}

// Quest's page scores (the bound of each page from its keys' per-dim max and min, averaged over
// every row and query head) against the CPU's quest_page_scores on the same bf16 values, fresh
// random inputs: GQA 4 and 1, pages of 16 and 4, head_dim 128 / 64 / 16, keys scattered over
// the pool, whole and partial last pages (its keys alone); then the pages' slots.
TEST(CudaSparseSelect, QuestPageScoresMatchCpuReference) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  struct Shape {
    int rows, heads, kv_heads, head_dim, n_prefix, page;
  };
  for (const Shape s :
       {Shape{32, 8, 2, 128, 1024, 16}, Shape{8, 4, 4, 64, 400, 4}, Shape{32, 32, 8, 16, 2048, 16},
        Shape{5, 7, 1, 32, 96, 16}, Shape{4, 8, 2, 128, 1001, 16}, Shape{8, 4, 4, 64, 402, 4}}) {
    SCOPED_TRACE("head_dim " + std::to_string(s.head_dim) + " n_prefix " +
                 std::to_string(s.n_prefix) + " page " + std::to_string(s.page));
    const int group = s.heads / s.kv_heads, qd = s.heads * s.head_dim,
              kvd = s.kv_heads * s.head_dim, pages = cuda::quest_pages(s.n_prefix, s.page);
    const PagedPrefix prefix = paged_prefix(s.n_prefix, 3, rng);
    const std::vector<int32_t>& slots = prefix.slots;
    auto q = test::random_floats(size_t(s.rows) * qd, rng);
    auto kc = test::random_floats(size_t(prefix.pool_slots) * kvd, rng, 1.5f);
    const auto qb = test::round_bf16(q), kb = test::round_bf16(kc);  // the CPU reads these too
    auto dq = test::to_device(qb), dk = test::to_device(kb);
    auto dpages = test::to_device(prefix.pages);
    cuda::DeviceBuffer<float> signs(size_t(2 * kvd), "signs"),
        scores(size_t(s.kv_heads) * pages, "scores");
    cuda::QuestParams p;
    p.q = reinterpret_cast<const cuda::bf16*>(dq.get());
    p.k_cache = reinterpret_cast<const cuda::bf16*>(dk.get());
    p.prefix = {dpages.get(), kTestPageShift};
    p.signs = signs.get();
    p.scores = scores.get();
    p.n_rows = s.rows;
    p.n_prefix = s.n_prefix;
    p.page_size = s.page;
    p.heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    cuda::quest_page_scores(p, nullptr);
    const auto got = test::to_host(scores);
    const std::vector<int32_t> all = selection_query_rows(s.rows, 0);
    for (int h = 0; h < s.kv_heads; ++h) {
      std::vector<const float*> keys;
      for (int j = 0; j < s.n_prefix; ++j)
        keys.push_back(kc.data() + size_t(slots[size_t(j)]) * kvd + h * s.head_dim);
      const auto want = cpu::quest_page_scores(q.data() + h * group * s.head_dim, qd, all, group,
                                               s.head_dim, keys, s.n_prefix, s.page);
      ASSERT_EQ(want.size(), size_t(pages));
      for (int t = 0; t < pages; ++t)
        EXPECT_NEAR(got[size_t(h) * pages + t], want[size_t(t)],
                    1e-5 * (std::abs(want[size_t(t)]) + s.head_dim))
            << "kv head " << h << " page " << t;
    }
    // The pages' slots: ascending pages in, ascending slots out, per set.
    const std::vector<int32_t> picked = {0, 3, 4, pages - 1, 1, 2, 5, pages - 2};
    auto dpicked = test::to_device(picked);
    cuda::DeviceBuffer<int32_t> out(picked.size() * size_t(s.page), "slots");
    cuda::quest_expand_pages(dpicked.get(), 2, 4, s.page, out.get(), nullptr);
    const auto expanded = test::to_host(out);
    for (size_t i = 0; i < picked.size(); ++i)
      for (int u = 0; u < s.page; ++u)
        EXPECT_EQ(expanded[i * size_t(s.page) + size_t(u)], picked[i] * s.page + u);
  }
  cuda::QuestParams no_pages;
  no_pages.n_prefix = 100;
  no_pages.page_size = 0;
  try {
    cuda::quest_page_scores(no_pages, nullptr);
    ADD_FAILURE() << "a page size of 0 was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("page size must be positive"), std::string::npos)
        << e.what();
  }
}

TEST(CudaSparseSelect, TopKRefusesBadArguments) {
  cuda::DeviceBuffer<float> scores(100, "scores");
  cuda::DeviceBuffer<int32_t> out(100, "out"), ws(cuda::top_k_workspace_ints(100, 1), "ws");
  for (const int k : {0, 100, 101}) {
    try {
      cuda::sparse_top_k(scores.get(), 100, k, 1, out.get(), ws.get(), nullptr);
      ADD_FAILURE() << "k " << k << " was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("needs 0 < k < n"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dllm
