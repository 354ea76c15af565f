#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "backend/cpu/exp_ops.h"
#include "backend/cpu/gemm_f32.h"
#include "core/thread_pool.h"

namespace dllm::cpu {
namespace {

// Rows of `width` values per thread at least: below ~16K values waking a thread costs more than
// the work.
int64_t rows_per_chunk(int64_t width) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1));
}

// Below this many multiply-adds in all heads' products one thread does the attention (as the
// GEMM's threshold, gemm_f32.cpp).
constexpr int64_t kParallelAttentionMacs = int64_t{1} << 20;

}  // namespace

void matmul_nt(const float* a, int64_t lda, const float* w, int64_t ldw, float* out, int64_t ldo,
               int64_t m, int64_t n, int64_t k, bool accumulate) {
  // Our own GEMM, not OpenBLAS: a row's result must not depend on the rows batched with it.
  gemm_nt_f32(a, lda, w, ldw, out, ldo, m, n, k, accumulate);
}

void rms_norm(const float* x, int64_t x_stride, const float* weight, float* out, int64_t out_stride,
              int64_t rows, int64_t dim, float eps) {
  parallel_for(
      rows,
      [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r) {
          const float* xr = x + r * x_stride;
          float* o = out + r * out_stride;
          double ss = 0.0;
          for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
          const float inv =
              1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(dim)) + eps);
          for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * inv * weight[i];
        }
      },
      rows_per_chunk(dim));
}

std::vector<float> rope_inv_freq(double theta, int64_t rotary_dim) {
  // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)) evaluated in fp32.
  std::vector<float> inv(static_cast<size_t>(rotary_dim / 2));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(base, e);
  }
  return inv;
}

void rope_neox(float* x, int64_t stride, int64_t rows, int64_t heads, int64_t head_dim,
               int64_t rotary_dim, std::span<const int32_t> positions,
               std::span<const float> inv_freq, float scale) {
  const int64_t half = rotary_dim / 2;
  parallel_for(
      rows,
      [&](int64_t first, int64_t last) {
        std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
        for (int64_t r = first; r < last; ++r) {
          const float pos = static_cast<float>(positions[static_cast<size_t>(r)]);
          for (int64_t i = 0; i < half; ++i) {
            const float angle = pos * inv_freq[static_cast<size_t>(i)];
            cs[static_cast<size_t>(i)] = std::cos(angle) * scale;
            sn[static_cast<size_t>(i)] = std::sin(angle) * scale;
          }
          for (int64_t h = 0; h < heads; ++h) {
            float* v = x + r * stride + h * head_dim;
            for (int64_t i = 0; i < half; ++i) {
              const float a = v[i], b = v[i + half];
              v[i] = a * cs[static_cast<size_t>(i)] - b * sn[static_cast<size_t>(i)];
              v[i + half] = b * cs[static_cast<size_t>(i)] + a * sn[static_cast<size_t>(i)];
            }
          }
        }
      },
      rows_per_chunk(heads * head_dim));
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  parallel_for(
      n, [&](int64_t first, int64_t last) { silu_mul_range(gate, up, out, first, last); },
      // An expf per value (~5 ns): 4K values already pay for waking a thread (a 32-row step of
      // the embedded model has 24K).
      4096);
}

void attention(const float* q, int64_t q_stride, std::span<const float* const> k_rows,
               std::span<const float* const> v_rows, std::span<const uint8_t> visible, float* out,
               int64_t out_stride, int64_t n_q, int64_t num_heads, int64_t num_kv_heads,
               int64_t head_dim, float scale, float* head_mean_probs) {
  const int64_t n_k = static_cast<int64_t>(k_rows.size());
  if (head_mean_probs) std::fill_n(head_mean_probs, n_q * n_k, 0.0f);
  const float inv_heads = 1.0f / static_cast<float>(num_heads);
  const int64_t group = num_heads / num_kv_heads;
  // Gather each KV head's keys and values into contiguous [n_k, head_dim] matrices so the two
  // products per head are plain GEMMs, whatever slots the keys came from.
  // V is gathered transposed, [head_dim, n_k], so that P V is the same row-times-row product.
  const auto run_groups = [&](int64_t g_first, int64_t g_last) {
    std::vector<float> kg(static_cast<size_t>(n_k * head_dim)),
        vt(static_cast<size_t>(n_k * head_dim));
    std::vector<float> scores(static_cast<size_t>(n_q * n_k));
    for (int64_t g = g_first; g < g_last; ++g) {
      parallel_for(
          n_k,
          [&](int64_t first, int64_t last) {
            for (int64_t j = first; j < last; ++j) {
              std::copy_n(k_rows[static_cast<size_t>(j)] + g * head_dim, head_dim,
                          &kg[static_cast<size_t>(j * head_dim)]);
              const float* v = v_rows[static_cast<size_t>(j)] + g * head_dim;
              for (int64_t d = 0; d < head_dim; ++d) vt[static_cast<size_t>(d * n_k + j)] = v[d];
            }
          },
          2 * rows_per_chunk(head_dim));
      for (int64_t hh = 0; hh < group; ++hh) {
        const int64_t h = g * group + hh;
        // The batch-invariant GEMM (gemm_f32.h): a query row's scores do not depend on n_q.
        matmul_nt(q + h * head_dim, q_stride, kg.data(), head_dim, scores.data(), n_k, n_q, n_k,
                  head_dim);
        const auto softmax_chunk = [&](int64_t first, int64_t last) {
          // A query that sees nothing gets zero probabilities: a zero output. Which rows saw
          // something matters only to head_mean_probs.
          std::unique_ptr<bool[]> seen;
          if (head_mean_probs) seen = std::make_unique<bool[]>(static_cast<size_t>(last - first));
          softmax_rows(&scores[static_cast<size_t>(first * n_k)],
                       &visible[static_cast<size_t>(first * n_k)], n_k, last - first, scale,
                       seen.get());
          if (!head_mean_probs) return;
          for (int64_t i = first; i < last; ++i) {
            if (!seen[static_cast<size_t>(i - first)]) continue;
            const float* s = &scores[static_cast<size_t>(i * n_k)];
            float* acc = head_mean_probs + i * n_k;
            for (int64_t j = 0; j < n_k; ++j) acc[j] += s[j] * inv_heads;
          }
        };
        // head_mean_probs sums over heads into shared rows: rows are split, heads are not.
        parallel_for(n_q, softmax_chunk, rows_per_chunk(n_k));
        matmul_nt(scores.data(), n_k, vt.data(), n_k, out + h * head_dim, out_stride, n_q, head_dim,
                  n_k);
      }
    }
  };
  // Without head_mean_probs the KV groups are independent: each thread takes whole groups and
  // every loop inside runs on it (a nested parallel_for is serial), the same arithmetic with no
  // wake-ups per head and no uneven split of a head's small products (a 640-row P V product is 7
  // row blocks). head_mean_probs sums over the heads in order into shared rows: one group at a
  // time then, its loops split over the threads.
  const int64_t macs = num_heads * n_q * n_k * head_dim * 2;
  if (!head_mean_probs && num_kv_heads > 1 && macs >= kParallelAttentionMacs)
    parallel_for(num_kv_heads, run_groups);
  else
    run_groups(0, num_kv_heads);
}

}  // namespace dllm::cpu
