// What the two flash-attention kernels (attention.cu: mma.sync, attention_sm90.cu: wgmma) do
// alike on the fragments a lane holds: the online softmax of one key tile and the split's partial
// result. Both MMA flavours leave scores and outputs in the same per-lane layout: s[nt][e] is key
// 8 nt + 2 (lane % 4) + (e & 1) of row a (e < 2) or row b = a + 8 (e >= 2), and o[dn][e] the same
// over dims; four lanes share a row.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_batch_layout.h"
#include "backend/cuda/kernels.h"

namespace dllm::cuda {

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The state of a split before its first tile (a serial item starts each split afresh).
template <int DN>
__device__ __forceinline__ void reset_flash_state(float (&m)[2], float (&l)[2], float (&o)[DN][4]) {
#pragma unroll
  for (int dn = 0; dn < DN; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;
}

// The largest of a lane's 2 NT scores of one row (h2), -inf if all are NaN. By halves, not one
// running max: log2 of the dependent steps instead of NT — the same value (the max of the non-NaN
// values does not depend on the order; fmaxf drops a NaN beside a number), up to the sign of a
// zero max, which no exponent or output depends on.
template <int NT>
__device__ __forceinline__ float row_tile_max(const float (&s)[NT][4], int h2) {
  float v[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) v[nt] = fmaxf(s[nt][2 * h2], s[nt][2 * h2 + 1]);
#pragma unroll
  for (int width = 1; width < NT; width *= 2)
#pragma unroll
    for (int i = 0; i + width < NT; i += 2 * width) v[i] = fmaxf(v[i], v[i + width]);
  return fmaxf(-INFINITY, v[0]);
}

// One tile's online softmax over the lane's two rows, in base 2 with the scale folded in:
// p = 2^(s * scale_log2 - m), one FFMA and one ex2 per score (scale_log2 = scale * log2 e). s holds
// unscaled scores, -inf where the mask hides the key; it receives p. m (base-2, scaled) and l are
// the running max and sum; alpha receives the factor o must be rescaled by (rescale_output) before
// this tile's P V joins it — a kernel that overlaps the previous tile's P V with this softmax
// rescales once that has landed. A row that has seen no visible key keeps m = -inf and offsets by
// 0.
template <int NT>
__device__ __forceinline__ void softmax_tile_scores(float (&s)[NT][4], float (&m)[2], float (&l)[2],
                                                    float scale_log2, float (&alpha)[2]) {
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    float mx = row_tile_max(s, h2);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[h2], mx * scale_log2);
    const float m_off = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h2] = exp2_approx(m[h2] - m_off);  // 0 while m was -inf (o, l are 0 then)
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 2 * h2; e < 2 * h2 + 2; ++e) {
        const float pv = exp2_approx(fmaf(s[nt][e], scale_log2, -m_off));  // -inf -> 0
        s[nt][e] = pv;
        sum += pv;
      }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l[h2] = l[h2] * alpha[h2] + sum;
    m[h2] = m_new;
  }
}

template <int DN>
__device__ __forceinline__ void rescale_output(float (&o)[DN][4], const float (&alpha)[2]) {
#pragma unroll
  for (int dn = 0; dn < DN; ++dn) {
    o[dn][0] *= alpha[0];
    o[dn][1] *= alpha[0];
    o[dn][2] *= alpha[1];
    o[dn][3] *= alpha[1];
  }
}

// rescale_output() where most tiles leave the rows' running max where it was (a long prompt's
// rows past their first tiles): the factor is then exactly 1, and a warp whose rows all have 1
// skips the 4 DN multiplications — the same bits. The warp-specialised Hopper kernel skips ~80 % of
// its rescales so; in the decoding split kernel the vote and branch cost more than they saved
// (SDAR-8B attention at 32K 2.59 -> 2.77 ms), so it keeps rescale_output().
template <int DN>
__device__ __forceinline__ void rescale_output_unless_settled(float (&o)[DN][4],
                                                              const float (&alpha)[2]) {
  if (__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) return;
  rescale_output(o, alpha);
}

// Both at once: the tile's softmax, then o rescaled.
template <int NT, int DN>
__device__ __forceinline__ void online_softmax_tile(float (&s)[NT][4], float (&o)[DN][4],
                                                    float (&m)[2], float (&l)[2],
                                                    float scale_log2) {
  float alpha[2];
  softmax_tile_scores(s, m, l, scale_log2, alpha);
  rescale_output(o, alpha);
}

// MAGE's hand-over (method-specs §1.6 step 1, AttentionBatchSeq::prefix_lse): each split's
// (m, l) of the lane's two rows over the prefix keys alone — keys [0, n_cache), before the
// queries' own. Keys come in increasing order, so the split's own (m, l) are the prefix's until
// the tile that holds key n_cache - 1: there, before its online softmax, the tile's prefix keys
// join them (prefix_stats_at_tile) and the result is written at once — nothing more is carried
// through the loop; a split that ends inside the prefix writes its final (m, l), one past it
// (-inf, 0) (prefix_stats_after_loop). Reads only: the attention's own numbers are untouched.

// (natural-log m, l) of the lane's rows ra and ra + 8 of KV head g at row (split * kv_heads + g) *
// rows + row of prefix_ml (rows past `rows` are padding).
__device__ __forceinline__ void write_prefix_stats(float* prefix_ml, int split, int kv_heads, int g,
                                                   int rows, int ra, const float (&m)[2],
                                                   const float (&l)[2], int lane) {
  if (lane % 4 != 0) return;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int row = ra + 8 * h2;
    if (row >= rows) continue;
    const int64_t idx = (static_cast<int64_t>(split) * kv_heads + g) * rows + row;
    prefix_ml[idx * 2] = m[h2] * 0.6931471805599453f;  // base 2 -> natural log
    prefix_ml[idx * 2 + 1] = l[h2];
  }
}

// The tile of keys [t0, t0 + 8 NT) holding the prefix's last key (0 < n_cache - t0 <= 8 NT): s
// holds its masked, unscaled scores (before online_softmax_tile), m and l the stats of the tiles
// before it (all prefix). Writes the prefix's (m, l) with the tile's prefix keys folded in, as
// online_softmax_tile folds a tile.
template <int NT>
__device__ __forceinline__ void prefix_stats_at_tile(const float (&s)[NT][4], const float (&m)[2],
                                                     const float (&l)[2], int t0, int n_cache,
                                                     float scale_log2, int lane, float* prefix_ml,
                                                     int split, int kv_heads, int g, int rows,
                                                     int ra) {
  const int in_prefix = n_cache - t0;
  float pm[2], pl[2];
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 2 * h2; e < 2 * h2 + 2; ++e)
        if (nt * 8 + (lane % 4) * 2 + (e & 1) < in_prefix) mx = fmaxf(mx, s[nt][e]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[h2], mx * scale_log2);
    const float m_off = m_new == -INFINITY ? 0.0f : m_new;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 2 * h2; e < 2 * h2 + 2; ++e)
        if (nt * 8 + (lane % 4) * 2 + (e & 1) < in_prefix)
          sum += exp2_approx(fmaf(s[nt][e], scale_log2, -m_off));  // -inf -> 0
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    pm[h2] = m_new;
    pl[h2] = l[h2] * exp2_approx(m[h2] - m_off) + sum;
  }
  write_prefix_stats(prefix_ml, split, kv_heads, g, rows, ra, pm, pl, lane);
}

// After the split's loop over n_tiles tiles from k_begin: a split wholly inside the prefix writes
// its (m, l), one wholly past it (-inf, 0); a split holding the prefix's end wrote at that tile.
__device__ __forceinline__ void prefix_stats_after_loop(const float (&m)[2], const float (&l)[2],
                                                        int k_begin, int n_tiles, int tile_keys,
                                                        int n_cache, int lane, float* prefix_ml,
                                                        int split, int kv_heads, int g, int rows,
                                                        int ra) {
  if (n_cache <= k_begin) {
    const float none_m[2] = {-INFINITY, -INFINITY}, none_l[2] = {0.0f, 0.0f};
    write_prefix_stats(prefix_ml, split, kv_heads, g, rows, ra, none_m, none_l, lane);
  } else if (n_cache > k_begin + n_tiles * tile_keys) {
    write_prefix_stats(prefix_ml, split, kv_heads, g, rows, ra, m, l, lane);
  }
}

// MAGE's selection from a few queries (AttentionBatchSeq::score_queries): the exact pass writes
// the raw scores of those queries' rows over the prefix keys as it computes them, and the
// selection's score sums read them instead of K. Row r of KV head g (query r / G, query head
// g G + r % G) is row map[r / G] G + r % G of g's [score_queries G][prefix_score_stride(
// n_cache)] block.
//
// Before its loop each warp finds the score rows of its 16 rows (-1: none) and whether any of
// them writes, in shared memory (ScoreRowsSmem), read there each tile: a warp without such rows
// (all but one or two of a block) pays a shared load and a branch a tile. Found again each tile,
// every warp loaded the plan's map and ran ~40 instructions a tile (Nsight Compute's source
// counters); held in registers through the loop, the rows spilled. SDAR-8B's 128K step 1: the
// attention with the hand-over 9.32-9.45 -> 9.21 ms (8.63 without it, 2026-11-30).
template <int WARPS>
struct ScoreRowsSmem {
  int rows[WARPS * 16];
  int warp_writes[WARPS];
};

template <class P>
__device__ __forceinline__ int prefix_score_index(const P& p, int r, int R, int group) {
  if (!p.prefix_scores || r >= R) return -1;
  const int t = p.score_map[r / group];
  return t < 0 ? -1 : t * group + r % group;
}

// The warp's rows are first_row .. first_row + 15; the warp reads only its own slice (no barrier).
template <int WARPS, class P>
__device__ __forceinline__ void stage_score_rows(const P& p, ScoreRowsSmem<WARPS>& smem,
                                                 int first_row, int R, int group, int warp,
                                                 int lane) {
  const int i = lane < 16 ? prefix_score_index(p, first_row + lane, R, group) : -1;
  if (lane < 16) smem.rows[warp * 16 + lane] = i;
  const bool any = __any_sync(0xffffffffu, i >= 0);
  if (lane == 0) smem.warp_writes[warp] = any;
  __syncwarp();
}

// Read each tile (volatile): a value kept through the loop would take a register or spill.
template <int WARPS>
__device__ __forceinline__ bool warp_writes_scores(const ScoreRowsSmem<WARPS>& smem, int warp) {
  return *static_cast<const volatile int*>(&smem.warp_writes[warp]) != 0;
}

// The tile of keys [t0, t0 + 8 NT) (t0 < n_cache): its prefix keys' masked, unscaled scores
// (before online_softmax_tile) of the lane's rows (the warp's rows lane / 4 and lane / 4 + 8) that
// write them, a key pair per 8-byte store: the four lanes of a row fill a sector (a pair
// straddling the prefix's end lands in the row's padding).
template <int NT, int WARPS, class P>
__device__ __forceinline__ void write_prefix_scores(const float (&s)[NT][4], const P& p,
                                                    const ScoreRowsSmem<WARPS>& smem, int warp,
                                                    int g, int group, int t0, int n_cache,
                                                    int lane) {
  const int64_t stride = batch_layout::prefix_score_stride(n_cache);
  const int64_t head_rows = static_cast<int64_t>(p.score_queries) * group;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int i = *static_cast<const volatile int*>(&smem.rows[warp * 16 + lane / 4 + 8 * h2]);
    if (i < 0) continue;
    float* row = p.prefix_scores + (g * head_rows + i) * stride;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int j = t0 + nt * 8 + (lane % 4) * 2;
      if (j < n_cache)
        *reinterpret_cast<float2*>(row + j) = make_float2(s[nt][2 * h2], s[nt][2 * h2 + 1]);
    }
  }
}

// MAGE's hand-over at one tile of keys [t0, t0 + 8 NT), between the tile's mask and its online
// softmax (both Hopper kernels): the raw prefix scores of the warp's rows that write them, and the
// prefix-only (m, l) if the tile holds the prefix's last key. split_of() gives the split; it is
// called only there (once a split), so a kernel holding it in shared memory loads it only then.
template <int NT, int WARPS, class P, class SplitOf>
__device__ __forceinline__ void hand_over_tile(const float (&s)[NT][4], const float (&m)[2],
                                               const float (&l)[2], const P& p,
                                               const ScoreRowsSmem<WARPS>& score_rows, int warp,
                                               SplitOf split_of, int g, int group, int rows, int ra,
                                               int t0, int n_cache, float scale_log2, int lane) {
  if (t0 < n_cache && warp_writes_scores(score_rows, warp))
    write_prefix_scores(s, p, score_rows, warp, g, group, t0, n_cache, lane);
  if (p.prefix_ml && n_cache > t0 && n_cache - t0 <= 8 * NT)
    prefix_stats_at_tile(s, m, l, t0, n_cache, scale_log2, lane, p.prefix_ml, split_of(),
                         p.kv_heads, g, rows, ra);
}

// This split's partial result for the lane's rows ra and ra + 8 of KV head g (rows past `rows`
// are padding): (m in natural-log units, l) and O / l in bf16, the layout combine_kernel reads.
// With one split, O / l in bf16 is the output itself: it goes there, and nothing merges it (no
// partial written, read back and weighted by 1).
template <int DN, class P>
__device__ __forceinline__ void write_split_partials(const P& p, int split, int g, int rows, int ra,
                                                     const float (&m)[2], const float (&l)[2],
                                                     const float (&o)[DN][4], int lane) {
  constexpr int D = DN * 8;
  if (p.splits == 1) {
    const int group = p.heads / p.kv_heads;
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int row = ra + 8 * h2;
      if (row >= rows) continue;
      const int64_t out_row = static_cast<int64_t>(row / group) * p.heads + g * group + row % group;
      const float inv_l = l[h2] > 0.0f ? 1.0f / l[h2] : 0.0f;  // a row that sees nothing: zeros
#pragma unroll
      for (int dn = 0; dn < DN; ++dn) {
        const int d = dn * 8 + (lane % 4) * 2;
        *reinterpret_cast<__nv_bfloat162*>(&p.out[out_row * D + d]) =
            __floats2bfloat162_rn(o[dn][2 * h2] * inv_l, o[dn][2 * h2 + 1] * inv_l);
      }
    }
    return;
  }
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int row = ra + 8 * h2;
    if (row >= rows) continue;
    const int64_t idx = (static_cast<int64_t>(split) * p.kv_heads + g) * rows + row;
    if (lane % 4 == 0) {
      p.partial_ml[idx * 2] = m[h2] * 0.6931471805599453f;  // base 2 -> natural log
      p.partial_ml[idx * 2 + 1] = l[h2];
    }
    const float inv_l = l[h2] > 0.0f ? 1.0f / l[h2] : 0.0f;
#pragma unroll
    for (int dn = 0; dn < DN; ++dn) {
      const int d = dn * 8 + (lane % 4) * 2;
      *reinterpret_cast<__nv_bfloat162*>(&p.partial_o[idx * D + d]) =
          __floats2bfloat162_rn(o[dn][2 * h2] * inv_l, o[dn][2 * h2 + 1] * inv_l);
    }
  }
}

}  // namespace dllm::cuda
