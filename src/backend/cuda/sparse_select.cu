// MAGE's selection (prefix-only LSE, score sums) and the gathered attention's key lists
// (sparse_select.h); the top-k is sparse_top_k.cu.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/mma_tile.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/sparse_select.h"

namespace dllm::cuda {
namespace {

// The selection's two passes over the prefix's K (prefix-only LSE, then score sums) on the
// tensor cores, with the flash kernels' fragment layout (attention_mma.cuh, flash_tile.cuh): a
// block takes one KV head's kSelBlockKeys prefix keys (the score sums: ScoreSumParams::
// block_keys), in tiles of kSelTile keys staged in shared memory, and all R = used rows x G
// query rows of that head, one warp per 16 rows. S = Q K^T by mma.sync m16n8k16; s[nt][e] is
// key nt * 8 + 2 (lane % 4) + (e & 1) of the lane's row a (e < 2) or a + 8. Row i of R is (used
// row rows_used[i / G], query head h * G + i % G). The score tile is the flash kernels'
// tile_scores (mma_tile.cuh), whose heads of 16 dims take one ldmatrix_x2 per key row (a copy
// here that always read 32 dims with ldmatrix_x4 ran past the shared tile at head_dim 16 — the
// illegal address of commit 725215a).
constexpr int kSelTile = 64;
constexpr int kSelBlockKeys = 1024;
constexpr int kSelMaxRows = kMaxSelectionRows;  // 16 warps
constexpr int kSelStages = 3;  // score-sum key tiles: two loading while one is used

// The warp's Q fragments (rows row0 .. row0 + 15; rows past R are zeros).
template <int D>
__device__ __forceinline__ void load_q_fragments(const ScoreSumParams& p, int h, int row0, int R,
                                                 uint32_t (&qf)[D / 16][4]) {
  const int lane = threadIdx.x & 31, group = p.heads / p.kv_heads;
#pragma unroll
  for (int reg = 0; reg < 4; ++reg) {
    const int i = row0 + lane / 4 + ((reg & 1) ? 8 : 0);
    const bool valid = i < R;
    const int r = valid ? p.rows_used[i / group] : 0, head = h * group + i % group;
    const bf16* q = p.q + (static_cast<int64_t>(r) * p.heads + head) * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int col = kk * 16 + (lane % 4) * 2 + (reg >= 2 ? 8 : 0);
      qf[kk][reg] = valid ? *reinterpret_cast<const uint32_t*>(q + col) : 0u;
    }
  }
}

// Starts staging keys [t0, t0 + kSelTile) of the prefix (zeros past `end`) into `kt`,
// [key][D + 8], as one cp.async group; key j's slot is slot_of(j).
template <int D, class SlotOf>
__device__ __forceinline__ void issue_key_tile(const ScoreSumParams& p, int h, int t0, int end,
                                               bf16* kt, SlotOf slot_of) {
  constexpr int kChunks = D / 8;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * D;
  for (int c = threadIdx.x; c < kSelTile * kChunks; c += blockDim.x) {
    const int kr = c / kChunks, kc = c % kChunks, j = t0 + kr;
    const bool valid = j < end;
    const int64_t slot = valid ? slot_of(j) : 0;
    ptx::cp_async16(&kt[kr * (D + 8) + kc * 8], p.k_cache + slot * kv_row + h * D + kc * 8, valid);
  }
  ptx::cp_async_commit();
}

// The same, waited for by the whole block.
template <int D>
__device__ __forceinline__ void load_key_tile(const ScoreSumParams& p, int h, int t0, int end,
                                              bf16* kt) {
  issue_key_tile<D>(p, h, t0, end, kt, [&](int j) { return prefix_slot(p.prefix, j); });
  ptx::cp_async_wait<0>();
  __syncthreads();
}

// LSE pass: each row's running (max, sum) over the block's keys in base 2 with the scale folded
// in (as online_softmax_tile), written as the block's partial (natural-log max, sum) per row:
// partial[((blockIdx.x * kv_heads + h) * R + i) * 2].
template <int D>
__global__ void __launch_bounds__(kSelMaxRows * 2)
    prefix_lse_kernel(ScoreSumParams p, float* partial) {
  extern __shared__ __align__(16) unsigned char raw[];
  bf16* kt = reinterpret_cast<bf16*>(raw);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = blockIdx.y;
  const int R = p.n_rows_used * (p.heads / p.kv_heads);
  const int first = blockIdx.x * kSelBlockKeys, end = min(p.n_prefix, first + kSelBlockKeys);
  const float scale_log2 = p.scale * 1.4426950408889634f;
  uint32_t qf[D / 16][4];
  load_q_fragments<D>(p, h, warp * 16, R, qf);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int t0 = first; t0 < end; t0 += kSelTile) {
    load_key_tile<D>(p, h, t0, end, kt);
    float s[kSelTile / 8][4];
    tile_scores<D, kSelTile, D + 8>(qf, kt, s, lane);
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kSelTile / 8; ++nt)
#pragma unroll
        for (int e = 2 * h2; e < 2 * h2 + 2; ++e) {
          const int j = t0 + nt * 8 + (lane % 4) * 2 + (e & 1);
          s[nt][e] = j < end ? s[nt][e] * scale_log2 : -INFINITY;
          mx = fmaxf(mx, s[nt][e]);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h2], mx);  // finite: every tile has a key
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kSelTile / 8; ++nt)
#pragma unroll
        for (int e = 2 * h2; e < 2 * h2 + 2; ++e) sum += exp2f(s[nt][e] - m_new);
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      l[h2] = l[h2] * exp2f(m[h2] - m_new) + sum;
      m[h2] = m_new;
    }
    __syncthreads();  // the tile is refilled next
  }
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int i = warp * 16 + lane / 4 + 8 * h2;
    if (lane % 4 != 0 || i >= R) continue;
    float* out = partial + ((static_cast<int64_t>(blockIdx.x) * p.kv_heads + h) * R + i) * 2;
    out[0] = m[h2] * 0.6931471805599453f;  // base 2 -> natural log
    out[1] = l[h2];
  }
}

// Merges (m2, l2) into the running (m, l) — a max and a sum of exponentials scaled to it, in
// natural log; m = -inf: no key yet.
__device__ __forceinline__ void merge_max_sum(float& m, float& l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  l = l * expf(m - mn) + l2 * expf(m2 - mn);
  m = mn;
}

// Score pass: p = exp(s * scale - lse_row) summed over the R rows of each key: within a lane
// (its 2 MT rows), over the 8 row groups of the warp (shuffles), then over the warps in a fixed
// order (shared memory) — deterministic, so a sequence selects the same set in any batch. A
// warp holds MT row tiles of 16 (tile_scores_rows: one key fragment load for MT MMAs). The key
// tiles are pipelined over kSelStages buffers, kSelStages - 1 tiles in flight during a tile's
// math, and one barrier a tile: the column sums are double-buffered and the previous tile's are
// stored after the next barrier (the kernel is the selection's one pass over K: its speed is the
// step-1 cost, §1.6). Two 16-row tiles a warp are capped at 128 registers, so that four
// 128-thread blocks fit an SM (131 left room for three; H200, SDAR-8B 32K, 512-key blocks, the
// sums of 34 layers 2.10 -> 1.63 ms, in two calls).
template <int D, int MT>
__global__ void __launch_bounds__(kSelMaxRows * 2 / MT, MT == 2 ? 2 : 1)
    score_sum_kernel(ScoreSumParams p) {
  extern __shared__ __align__(16) unsigned char raw[];
  constexpr int kTileElems = kSelTile * (D + 8), kRowsPerWarp = 16 * MT;
  bf16* tiles = reinterpret_cast<bf16*>(raw);  // [kSelStages][kSelTile][D + 8]
  const int warps = blockDim.x >> 5;
  // [2][warps][kSelTile]: a tile's per-warp column sums, alternating between two buffers.
  float* colsum = reinterpret_cast<float*>(tiles + kSelStages * kTileElems);
  // The block's key slots, staged once: read from global memory per tile, each tile's loads
  // waited a round trip before they could go out.
  int32_t* slots = reinterpret_cast<int32_t*>(colsum + 2 * warps * kSelTile);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = blockIdx.y;
  const int group = p.heads / p.kv_heads;
  const int R = p.n_rows_used * group;
  const int first = blockIdx.x * p.block_keys, end = min(p.n_prefix, first + p.block_keys);
  const float scale_log2 = p.scale * 1.4426950408889634f;
  for (int i = threadIdx.x; i < end - first; i += blockDim.x)
    slots[i] = prefix_slot(p.prefix, first + i);
  auto staged_slot = [&](int j) { return slots[j - first]; };
  __syncthreads();
  // The first tiles' loads go out before the rows' lse is gathered (one cp.async group a tile,
  // an empty one past the end keeps the count).
  for (int st = 0; st < kSelStages - 1; ++st) {
    const int t = first + st * kSelTile;
    if (t < end)
      issue_key_tile<D>(p, h, t, end, tiles + st * kTileElems, staged_slot);
    else
      ptx::cp_async_commit();
  }
  uint32_t qf[MT][D / 16][4];
#pragma unroll
  for (int m = 0; m < MT; ++m) load_q_fragments<D>(p, h, warp * kRowsPerWarp + m * 16, R, qf[m]);
  // Each row's prefix LSE in base 2; +inf for padding rows (p = 0).
  float lse2[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int i = warp * kRowsPerWarp + m * 16 + lane / 4 + 8 * h2;
      lse2[m][h2] = i < R ? p.lse[p.rows_used[i / group] * p.heads + h * group + i % group] *
                                1.4426950408889634f
                          : INFINITY;
    }
  // Stores the sums of tile t0 (its column sums in buffer `b`) once every warp wrote them.
  auto store_tile = [&](int t0, int b) {
    for (int t = threadIdx.x; t < kSelTile; t += blockDim.x) {
      if (t0 + t >= end) continue;
      float acc = 0.0f;
      for (int w = 0; w < warps; ++w) acc += colsum[(b * warps + w) * kSelTile + t];
      p.scores[static_cast<int64_t>(h) * p.n_prefix + t0 + t] = acc / static_cast<float>(R);
    }
  };
  for (int t0 = first, it = 0; t0 < end; t0 += kSelTile, ++it) {
    ptx::cp_async_wait<kSelStages - 2>();  // this tile's group is complete
    // Every warp's tile it - 1 is done: its buffer takes the tile kSelStages - 1 ahead, and its
    // column sums are complete.
    __syncthreads();
    const int ahead = t0 + (kSelStages - 1) * kSelTile;
    if (ahead < end)
      issue_key_tile<D>(p, h, ahead, end, tiles + ((it + kSelStages - 1) % kSelStages) * kTileElems,
                        staged_slot);
    else
      ptx::cp_async_commit();
    if (it > 0) store_tile(t0 - kSelTile, (it - 1) & 1);
    const bf16* kt = tiles + (it % kSelStages) * kTileElems;
    float* cs = colsum + ((it & 1) * warps + warp) * kSelTile;
    // Half a tile at a time: the scores of MT row tiles stay in registers.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float s[MT][kSelTile / 16][4];
      tile_scores_rows<D, kSelTile / 2, D + 8, MT>(qf, kt + half * (kSelTile / 2) * (D + 8), s,
                                                   lane);
#pragma unroll
      for (int nt = 0; nt < kSelTile / 16; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float v = 0.0f;
#pragma unroll
          for (int m = 0; m < MT; ++m)
            v += exp2f(fmaf(s[m][nt][c], scale_log2, -lse2[m][0])) +
                 exp2f(fmaf(s[m][nt][c + 2], scale_log2, -lse2[m][1]));
          v += __shfl_xor_sync(0xffffffffu, v, 4);
          v += __shfl_xor_sync(0xffffffffu, v, 8);
          v += __shfl_xor_sync(0xffffffffu, v, 16);
          if (lane < 4) cs[half * (kSelTile / 2) + nt * 8 + lane * 2 + c] = v;
        }
    }
  }
  ptx::cp_async_wait<0>();
  __syncthreads();
  const int tiles_done = (end - first + kSelTile - 1) / kSelTile;
  if (tiles_done > 0) store_tile(first + (tiles_done - 1) * kSelTile, (tiles_done - 1) & 1);
}

// Calls f(std::integral_constant<int, D>) for the head_dim, after checking the rows fit.
template <class F>
void with_head_dim(const ScoreSumParams& p, const char* what, F&& f) {
  const int R = p.n_rows_used * (p.heads / p.kv_heads);
  if (R > kSelMaxRows)
    fail(what, ": ", p.n_rows_used, " selection rows x ", p.heads / p.kv_heads,
         " query heads per KV head exceed ", kSelMaxRows,
         " (--sparse-select-queries selects from fewer rows)");
  switch (p.head_dim) {
    case 16:  // the embedded models' heads (tile_scores: one ldmatrix_x2 per 16 dims)
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    case 256:
      return f(std::integral_constant<int, 256>{});
  }
  fail(what, ": head_dim must be 16, 32, 64, 128 or 256 (got ", p.head_dim, ")");
}

dim3 selection_grid(const ScoreSumParams& p) {
  return dim3((p.n_prefix + kSelBlockKeys - 1) / kSelBlockKeys, p.kv_heads);
}
int selection_threads(const ScoreSumParams& p) {
  return (p.n_rows_used * (p.heads / p.kv_heads) + 15) / 16 * 32;
}
template <int D>
constexpr size_t kTileBytes = kSelTile*(D + 8) * sizeof(bf16);
// A warp per (KV head, used row i, query head): its lse from the chunks' (natural-log max, sum)
// pairs, chunk c's at partial[((c * kv_heads + h) * partial_rows + row) * 2] — row = i
// (prefix_lse_kernel's chunks: partial_rows = R), or with by_query_row its query row r * G + gi
// (the attention's splits: partial_rows = n_q * G). Lane j merges chunks j, j + 32, ... in order,
// then the lanes merge in a fixed tree into lane 0: the same bits in any batch. (One thread a row
// merging ~33 splits in series took ~10 us a layer at 32K.)
constexpr int kMergeWarps = 8;
// The warp's merge of row `row` of KV head h; lane 0 returns its lse.
__device__ __forceinline__ float warp_merged_lse(const ScoreSumParams& p, const float* partial,
                                                 int chunks, int partial_rows, int h, int row) {
  const int lane = threadIdx.x & 31;
  float m = -INFINITY, l = 0.0f;
  for (int c = lane; c < chunks; c += 32) {
    const float* pc =
        partial + ((static_cast<int64_t>(c) * p.kv_heads + h) * partial_rows + row) * 2;
    merge_max_sum(m, l, pc[0], pc[1]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_down_sync(0xffffffffu, m, offset);
    const float l2 = __shfl_down_sync(0xffffffffu, l, offset);
    merge_max_sum(m, l, m2, l2);
  }
  return m + logf(l);
}
__global__ void __launch_bounds__(kMergeWarps * 32)
    prefix_lse_merge_kernel(ScoreSumParams p, const float* partial, int chunks, int partial_rows,
                            bool by_query_row, float* lse) {
  const int group = p.heads / p.kv_heads, R = p.n_rows_used * group;
  const int e = blockIdx.x * kMergeWarps + static_cast<int>(threadIdx.x >> 5);
  if (e >= p.kv_heads * R) return;  // the whole warp
  const int h = e / R, i = e % R;
  const int row = by_query_row ? p.rows_used[i / group] * group + i % group : i;
  const float row_lse = warp_merged_lse(p, partial, chunks, partial_rows, h, row);
  if ((threadIdx.x & 31) == 0)
    lse[p.rows_used[i / group] * p.heads + h * group + i % group] = row_lse;
}
int merge_blocks(const ScoreSumParams& p) {
  const int rows = p.kv_heads * p.n_rows_used * (p.heads / p.kv_heads);
  return (rows + kMergeWarps - 1) / kMergeWarps;
}

// One thread per (KV head, used row, query head): its block keys' scores, folded into its lse.
__global__ void fold_block_keys_kernel(ScoreSumParams p, BlockKeys b, float* lse) {
  const int group = p.heads / p.kv_heads, R = p.n_rows_used * group;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= p.kv_heads * R) return;
  const int h = e / R, i = e % R;
  const int r = p.rows_used[i / group], head = h * group + i % group;
  const bf16* q = p.q + (static_cast<int64_t>(r) * p.heads + head) * p.head_dim;
  float m = lse[r * p.heads + head], l = 1.0f;  // exp(lse) = e^m * 1
  for (int t = 0; t < b.n; ++t) {
    const bool seen = b.kind == MaskKind::kBidirectional ||
                      (b.kind == MaskKind::kCausal && t <= r) ||
                      (b.kind == MaskKind::kBlockCausal &&
                       b.positions[t] / b.block_size <= b.positions[r] / b.block_size);
    if (!seen) continue;
    const bf16* k =
        p.k_cache + static_cast<int64_t>(b.slots[t]) * p.kv_heads * p.head_dim + h * p.head_dim;
    float dot = 0.0f;
    for (int d = 0; d < p.head_dim; ++d) dot += __bfloat162float(q[d]) * __bfloat162float(k[d]);
    const float x = dot * p.scale, mn = fmaxf(m, x);
    l = l * expf(m - mn) + expf(x - mn);
    m = mn;
  }
  lse[r * p.heads + head] = m + logf(l);
}

// Grid (key chunks, KV heads): first the rows' lse (read, or merged from the attention's
// splits by a warp a row as prefix_lse_merge_kernel merges them: the same bits), then a thread
// four keys at a time, its rows' raw scores in order (16-byte loads, coalesced).
constexpr int kFromScoresThreads = 256;
__global__ void __launch_bounds__(kFromScoresThreads)
    score_sum_from_scores_kernel(ScoreSumParams p, HandedScores hs) {
  __shared__ float lse2[batch_layout::kMaxHandedScoreRows];  // base 2
  const int h = blockIdx.y, group = p.heads / p.kv_heads, R = p.n_rows_used * group;
  for (int i = static_cast<int>(threadIdx.x >> 5); i < R; i += kFromScoresThreads / 32) {
    const int r = p.rows_used[i / group];
    const float row_lse =
        !hs.prefix_ml ? p.lse[r * p.heads + h * group + i % group]
        : hs.ml_of_used_rows
            ? warp_merged_lse(p, hs.prefix_ml, hs.splits, R, h, i)
            : warp_merged_lse(p, hs.prefix_ml, hs.splits, hs.n_q * group, h, r * group + i % group);
    if ((threadIdx.x & 31) == 0) lse2[i] = row_lse * 1.4426950408889634f;
  }
  __syncthreads();
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const int64_t n = p.n_prefix, stride = hs.stride;
  const float* rows = hs.raw + h * R * stride;
  for (int64_t j = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * 4; j < n;
       j += int64_t{gridDim.x} * blockDim.x * 4) {
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int r = 0; r < R; ++r) {
      const float4 s = *reinterpret_cast<const float4*>(rows + r * stride + j);
      v[0] += exp2f(fmaf(s.x, scale_log2, -lse2[r]));
      v[1] += exp2f(fmaf(s.y, scale_log2, -lse2[r]));
      v[2] += exp2f(fmaf(s.z, scale_log2, -lse2[r]));
      v[3] += exp2f(fmaf(s.w, scale_log2, -lse2[r]));
    }
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (j + e < n) p.scores[h * n + j + e] = v[e] / static_cast<float>(R);
  }
}

// Grid (chunks, KV heads), a warp a used row at a time: the row's (m, l) over the chunk's keys,
// base 2 while summing (four keys a lane and step: one rescale for four), written as the
// attention's hand-over writes them (m in natural-log units).
constexpr int kMlWarps = 8;
__device__ __forceinline__ void merge_max_sum2(float& m, float& l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  l = l * exp2f(m - mn) + l2 * exp2f(m2 - mn);
  m = mn;
}
__global__ void __launch_bounds__(kMlWarps * 32)
    prefix_ml_from_scores_kernel(ScoreSumParams p, HandedScores hs, float* ml) {
  const int h = blockIdx.y, R = p.n_rows_used * (p.heads / p.kv_heads);
  const int lane = threadIdx.x & 31;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const int64_t j0 = int64_t{blockIdx.x} * kPrefixMlChunkKeys;
  const int64_t j1 = min(int64_t{p.n_prefix}, j0 + kPrefixMlChunkKeys);
  for (int r = static_cast<int>(threadIdx.x >> 5); r < R; r += kMlWarps) {
    const float* row = hs.raw + (int64_t{h} * R + r) * hs.stride;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = j0 + lane * 4; j < j1; j += 32 * 4) {
      const float4 s = *reinterpret_cast<const float4*>(row + j);  // the stride pads to 4
      const float x[4] = {s.x * scale_log2, j + 1 < j1 ? s.y * scale_log2 : -INFINITY,
                          j + 2 < j1 ? s.z * scale_log2 : -INFINITY,
                          j + 3 < j1 ? s.w * scale_log2 : -INFINITY};
      const float mn = fmaxf(m, fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3])));  // x[0] is a key
      l = l * exp2f(m - mn) + (exp2f(x[0] - mn) + exp2f(x[1] - mn)) +
          (exp2f(x[2] - mn) + exp2f(x[3] - mn));
      m = mn;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      merge_max_sum2(m, l, __shfl_down_sync(0xffffffffu, m, offset),
                     __shfl_down_sync(0xffffffffu, l, offset));
    if (lane == 0) {
      float* out = ml + ((int64_t{blockIdx.x} * p.kv_heads + h) * R + r) * 2;
      out[0] = m * 0.6931471805599453f;  // base 2 -> natural log
      out[1] = l;
    }
  }
}

// Block (sequence, KV head): its list of n_keys physical slots for this layer.
__global__ void sparse_gather_keys_kernel(int32_t* staging, const int32_t* table, int kv_heads,
                                          int layer, int page_shift, int masked_slot) {
  namespace S = sparse_keys;
  const int32_t* e = table + blockIdx.x * S::kInts;
  if (layer < e[S::kFirstLayer]) return;
  const int h = blockIdx.y, k = e[S::kK], sel_prefix = e[S::kSelPrefix], n = e[S::kNKeys];
  const int per_entry = e[S::kSetPage];
  const uint64_t addr = static_cast<uint32_t>(e[S::kSetsLo]) |
                        (static_cast<uint64_t>(static_cast<uint32_t>(e[S::kSetsHi])) << 32);
  const int32_t* sets = reinterpret_cast<const int32_t*>(addr) +
                        (static_cast<int64_t>(layer) * kv_heads + h) * (k / per_entry);
  const int32_t* pages = staging + e[S::kPagesAt];
  int32_t* out = staging + e[S::kKeysAt] + static_cast<int64_t>(h) * n;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const int slot = j >= k           ? sel_prefix + (j - k)
                     : per_entry == 1 ? sets[j]
                                      : sets[j / per_entry] * per_entry + j % per_entry;
    // A selected page's slots past the prefix (Quest's partial last page) are no keys of it.
    out[j] = j < k && slot >= sel_prefix ? masked_slot : paged_slot(pages, slot, page_shift);
  }
}

}  // namespace

size_t prefix_lse_workspace_floats(int n_prefix, int n_rows_used, int heads, int kv_heads) {
  const size_t chunks = static_cast<size_t>((n_prefix + kSelBlockKeys - 1) / kSelBlockKeys);
  return chunks * static_cast<size_t>(kv_heads) * n_rows_used * (heads / kv_heads) * 2;
}

void mage_prefix_lse(const ScoreSumParams& p, float* lse, float* workspace, cudaStream_t stream) {
  with_head_dim(p, "mage_prefix_lse", [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (p.n_prefix == 0 || p.n_rows_used == 0) return;
    prefix_lse_kernel<D>
        <<<selection_grid(p), selection_threads(p), kTileBytes<D>, stream>>>(p, workspace);
    DLLM_CUDA_LAUNCH_CHECK();
    const int R = p.n_rows_used * (p.heads / p.kv_heads);
    prefix_lse_merge_kernel<<<merge_blocks(p), kMergeWarps * 32, 0, stream>>>(
        p, workspace, selection_grid(p).x, R, false, lse);
    DLLM_CUDA_LAUNCH_CHECK();
  });
}

void mage_prefix_lse_from_attention(const ScoreSumParams& p, const float* prefix_ml, int splits,
                                    int n_q, float* lse, cudaStream_t stream) {
  if (splits <= 0) fail("mage_prefix_lse_from_attention: needs splits > 0 (got ", splits, ")");
  const int group = p.heads / p.kv_heads, n = p.kv_heads * p.n_rows_used * group;
  if (n == 0) return;
  prefix_lse_merge_kernel<<<merge_blocks(p), kMergeWarps * 32, 0, stream>>>(p, prefix_ml, splits,
                                                                            n_q * group, true, lse);
  DLLM_CUDA_LAUNCH_CHECK();
}

namespace {
// The handed-over scores' rows (checked: at most kMaxHandedScoreRows, a stride the float4 loads
// can take), for `who`'s error messages.
int handed_score_rows(const ScoreSumParams& p, const HandedScores& hs, const char* who) {
  const int R = p.n_rows_used * (p.heads / p.kv_heads);
  if (R > batch_layout::kMaxHandedScoreRows)
    fail(who, ": ", p.n_rows_used, " rows x ", p.heads / p.kv_heads,
         " query heads per KV head exceed ", batch_layout::kMaxHandedScoreRows);
  if (hs.stride % 4 != 0 || hs.stride < p.n_prefix)
    fail(who, ": the row stride must be a multiple of 4 of at least ", p.n_prefix, " (got ",
         hs.stride, ")");
  return R;
}
}  // namespace

void mage_score_sum_from_scores(const ScoreSumParams& p, const HandedScores& hs,
                                cudaStream_t stream) {
  const int R = handed_score_rows(p, hs, "mage_score_sum_from_scores");
  if (hs.prefix_ml && hs.splits <= 0)
    fail("mage_score_sum_from_scores: needs splits > 0 (got ", hs.splits, ")");
  if (p.n_prefix == 0 || R == 0) return;
  // A few blocks a KV head per SM, each merging its rows' lse once: more blocks only repeat it.
  const int per_block = kFromScoresThreads * 4;
  const int chunks = std::min((p.n_prefix + per_block - 1) / per_block,
                              std::max(1, 4 * device_sm_count() / p.kv_heads));
  score_sum_from_scores_kernel<<<dim3(chunks, p.kv_heads), kFromScoresThreads, 0, stream>>>(p, hs);
  DLLM_CUDA_LAUNCH_CHECK();
}

int prefix_ml_chunks(int n_prefix) {
  return std::max(1, (n_prefix + kPrefixMlChunkKeys - 1) / kPrefixMlChunkKeys);
}

size_t prefix_ml_from_scores_floats(int n_prefix, int n_rows_used, int heads) {
  // kv_heads x (n_rows_used x G) rows = n_rows_used x heads
  return static_cast<size_t>(prefix_ml_chunks(n_prefix)) * n_rows_used * heads * 2;
}

void mage_prefix_ml_from_scores(const ScoreSumParams& p, const HandedScores& hs, float* ml,
                                cudaStream_t stream) {
  const int R = handed_score_rows(p, hs, "mage_prefix_ml_from_scores");
  if (p.n_prefix == 0 || R == 0) return;
  prefix_ml_from_scores_kernel<<<dim3(prefix_ml_chunks(p.n_prefix), p.kv_heads), kMlWarps * 32, 0,
                                 stream>>>(p, hs, ml);
  DLLM_CUDA_LAUNCH_CHECK();
}

void fold_block_keys_lse(const ScoreSumParams& p, const BlockKeys& b, float* lse,
                         cudaStream_t stream) {
  if (b.kind != MaskKind::kCausal && b.kind != MaskKind::kBidirectional &&
      b.kind != MaskKind::kBlockCausal)
    fail("fold_block_keys_lse: the mask must be causal, bidirectional or block-causal");
  if (b.kind == MaskKind::kBlockCausal && b.block_size <= 0)
    fail("fold_block_keys_lse: block-causal needs a positive block size");
  const int n = p.kv_heads * p.n_rows_used * (p.heads / p.kv_heads);
  if (n == 0 || b.n == 0) return;
  fold_block_keys_kernel<<<(n + 127) / 128, 128, 0, stream>>>(p, b, lse);
  DLLM_CUDA_LAUNCH_CHECK();
}

void sparse_gather_keys(int32_t* staging, const int32_t* table, int n_seqs, int kv_heads, int layer,
                        int page_shift, int masked_slot, cudaStream_t stream) {
  if (n_seqs == 0) return;
  sparse_gather_keys_kernel<<<dim3(n_seqs, kv_heads), 256, 0, stream>>>(
      staging, table, kv_heads, layer, page_shift, masked_slot);
  DLLM_CUDA_LAUNCH_CHECK();
}

// The score sums with MT row tiles per warp (head_dim 256 keeps one: its Q fragments alone
// would take 128 registers a thread at two).
template <int D, int MT>
void launch_score_sum(const ScoreSumParams& p, cudaStream_t stream) {
  const int R = p.n_rows_used * (p.heads / p.kv_heads);
  const int warps = (R + 16 * MT - 1) / (16 * MT);
  auto smem_bytes = [](int w, int block_keys) {
    return kSelStages * kTileBytes<D> + static_cast<size_t>(2 * w) * kSelTile * sizeof(float) +
           block_keys * sizeof(int32_t);
  };
  static PerDevice<bool> sized;  // head_dim 128 and 256: the tiles pass the default 48 KB
  sized.get([&] {
    DLLM_CUDA_CHECK(
        cudaFuncSetAttribute(score_sum_kernel<D, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem_bytes(kSelMaxRows / (16 * MT), kSelBlockKeys))));
    return true;
  });
  ScoreSumParams run = p;
  if (run.block_keys == 0) run.block_keys = warps == 1 ? 256 : kSelBlockKeys;
  const dim3 grid((run.n_prefix + run.block_keys - 1) / run.block_keys, run.kv_heads);
  score_sum_kernel<D, MT><<<grid, warps * 32, smem_bytes(warps, run.block_keys), stream>>>(run);
  DLLM_CUDA_LAUNCH_CHECK();
}

void mage_score_sum(const ScoreSumParams& p, cudaStream_t stream) {
  if (p.rows_per_warp != 16 && p.rows_per_warp != 32)
    fail("mage_score_sum: rows_per_warp must be 16 or 32 (got ", p.rows_per_warp, ")");
  if (p.block_keys != 0 &&
      (p.block_keys < kSelTile || p.block_keys > kSelBlockKeys || p.block_keys % kSelTile != 0))
    fail("mage_score_sum: block_keys must be 0 (by the rows) or a multiple of ", kSelTile,
         " up to ", kSelBlockKeys, " (got ", p.block_keys, ")");
  with_head_dim(p, "mage_score_sum", [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (p.n_prefix == 0 || p.n_rows_used == 0) return;
    if constexpr (D <= 128) {
      if (p.rows_per_warp == 32) return launch_score_sum<D, 2>(p, stream);
    }
    launch_score_sum<D, 1>(p, stream);
  });
}

}  // namespace dllm::cuda
