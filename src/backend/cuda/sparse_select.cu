// MAGE's selection (prefix-only LSE, score sums, per-KV-head top-k) and the gathered
// attention's key lists (sparse_select.h).
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/mma_tile.cuh"
#include "backend/cuda/sparse_select.h"

namespace dllm::cuda {
namespace {

constexpr int kTopKThreads = 1024;
constexpr int kTopKRun = 8;    // consecutive elements per thread in the compaction pass
constexpr int kTopKLoads = 8;  // loads in flight per thread in a histogram pass

// The selection's two passes over the prefix's K (prefix-only LSE, then score sums) on the
// tensor cores, with the flash kernels' fragment layout (attention_mma.cuh, flash_tile.cuh): a
// block takes one KV head's kSelBlockKeys prefix keys, in tiles of kSelTile keys staged in shared
// memory, and all R = used rows x G query rows of that head, one warp per 16 rows. S = Q K^T by
// mma.sync m16n8k16; s[nt][e] is key nt * 8 + 2 (lane % 4) + (e & 1) of the lane's row a (e < 2)
// or a + 8. Row i of R is (used row rows_used[i / G], query head h * G + i % G). The score tile
// is the flash kernels' tile_scores (mma_tile.cuh), whose heads of 16 dims take one ldmatrix_x2
// per key row (a copy here that always read 32 dims with ldmatrix_x4 ran past the shared tile at
// head_dim 16 — the illegal address of commit 725215a).
constexpr int kSelTile = 64;
constexpr int kSelBlockKeys = 1024;
constexpr int kSelMaxRows = 256;  // 16 warps
constexpr int kSelStages = 3;     // score-sum key tiles: two loading while one is used

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
// [key][D + 8], as one cp.async group; key j's slot is slots[j - base].
template <int D>
__device__ __forceinline__ void issue_key_tile(const ScoreSumParams& p, int h, int t0, int end,
                                               bf16* kt, const int32_t* slots, int base) {
  constexpr int kChunks = D / 8;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * D;
  for (int c = threadIdx.x; c < kSelTile * kChunks; c += blockDim.x) {
    const int kr = c / kChunks, kc = c % kChunks, j = t0 + kr;
    const bool valid = j < end;
    const int64_t slot = valid ? slots[j - base] : 0;
    ptx::cp_async16(&kt[kr * (D + 8) + kc * 8], p.k_cache + slot * kv_row + h * D + kc * 8, valid);
  }
  ptx::cp_async_commit();
}

// The same, waited for by the whole block.
template <int D>
__device__ __forceinline__ void load_key_tile(const ScoreSumParams& p, int h, int t0, int end,
                                              bf16* kt) {
  issue_key_tile<D>(p, h, t0, end, kt, p.prefix_slots, 0);
  ptx::cp_async_wait<0>();
  __syncthreads();
}

// LSE pass: each row's running (max, sum) over the block's keys in base 2 with the scale folded
// in (as online_softmax_tile), written as the block's partial (natural-log max, sum) per row:
// partial[((blockIdx.x * kv_heads + h) * R + i) * 2].
template <int D>
__global__ void __launch_bounds__(kSelMaxRows * 2) prefix_lse_kernel(ScoreSumParams p,
                                                                      float* partial) {
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

// Score pass: p = exp(s * scale - lse_row) summed over the R rows of each key: within a lane
// (rows a, a + 8), over the 8 row groups of the warp (shuffles), then over the warps in a fixed
// order (shared memory) — deterministic, so a sequence selects the same set in any batch. The
// key tiles are pipelined over kSelStages buffers: the next tiles' loads are in flight during
// this tile's math (the kernel is the selection's one pass over K: its speed is the step-1
// cost, §1.6).
template <int D>
__global__ void __launch_bounds__(kSelMaxRows * 2) score_sum_kernel(ScoreSumParams p) {
  extern __shared__ __align__(16) unsigned char raw[];
  constexpr int kTileElems = kSelTile * (D + 8);
  bf16* tiles = reinterpret_cast<bf16*>(raw);  // [kSelStages][kSelTile][D + 8]
  float* colsum = reinterpret_cast<float*>(tiles + kSelStages * kTileElems);  // [warps][kSelTile]
  // The block's key slots, staged once: read from global memory per tile, each tile's loads
  // waited a round trip before they could go out.
  int32_t* slots = reinterpret_cast<int32_t*>(colsum + (blockDim.x >> 5) * kSelTile);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = blockIdx.y;
  const int warps = blockDim.x >> 5, group = p.heads / p.kv_heads;
  const int R = p.n_rows_used * group;
  const int first = blockIdx.x * kSelBlockKeys, end = min(p.n_prefix, first + kSelBlockKeys);
  const float scale_log2 = p.scale * 1.4426950408889634f;
  uint32_t qf[D / 16][4];
  load_q_fragments<D>(p, h, warp * 16, R, qf);
  float lse2[2];  // each row's prefix LSE in base 2; +inf for padding rows (p = 0)
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int i = warp * 16 + lane / 4 + 8 * h2;
    lse2[h2] = i < R ? p.lse[p.rows_used[i / group] * p.heads + h * group + i % group] *
                           1.4426950408889634f
                     : INFINITY;
  }
  for (int i = threadIdx.x; i < end - first; i += blockDim.x) slots[i] = p.prefix_slots[first + i];
  __syncthreads();
  // One cp.async group per tile (an empty one past the end keeps the count).
  for (int st = 0; st < kSelStages - 1; ++st) {
    const int t = first + st * kSelTile;
    if (t < end)
      issue_key_tile<D>(p, h, t, end, tiles + st * kTileElems, slots, first);
    else
      ptx::cp_async_commit();
  }
  for (int t0 = first, it = 0; t0 < end; t0 += kSelTile, ++it) {
    const bf16* kt = tiles + (it % kSelStages) * kTileElems;
    // The tile kSelStages - 1 ahead, into the buffer of the previous iteration's tile, which
    // every warp finished with before the barrier that ended that iteration.
    const int ahead = t0 + (kSelStages - 1) * kSelTile;
    if (ahead < end)
      issue_key_tile<D>(p, h, ahead, end, tiles + ((it + kSelStages - 1) % kSelStages) * kTileElems,
                        slots, first);
    else
      ptx::cp_async_commit();
    ptx::cp_async_wait<kSelStages - 1>();  // this tile's group is complete
    __syncthreads();
    float s[kSelTile / 8][4];
    tile_scores<D, kSelTile, D + 8>(qf, kt, s, lane);
#pragma unroll
    for (int nt = 0; nt < kSelTile / 8; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float v = exp2f(fmaf(s[nt][c], scale_log2, -lse2[0])) +
                  exp2f(fmaf(s[nt][c + 2], scale_log2, -lse2[1]));
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        v += __shfl_xor_sync(0xffffffffu, v, 8);
        v += __shfl_xor_sync(0xffffffffu, v, 16);
        if (lane < 4) colsum[warp * kSelTile + nt * 8 + lane * 2 + c] = v;
      }
    __syncthreads();
    for (int t = threadIdx.x; t < kSelTile; t += blockDim.x) {
      if (t0 + t >= end) continue;
      float acc = 0.0f;
      for (int w = 0; w < warps; ++w) acc += colsum[w * kSelTile + t];
      p.scores[static_cast<int64_t>(h) * p.n_prefix + t0 + t] = acc / static_cast<float>(R);
    }
    __syncthreads();  // the tile and the column sums are refilled next
  }
  ptx::cp_async_wait<0>();
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
constexpr size_t kTileBytes = kSelTile * (D + 8) * sizeof(bf16);
// Float bits mapped to an unsigned key with the same order (negative scores too: Quest's bound).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Exclusive scan of `v` over the block (kTopKThreads threads): warp shuffles, the warps' totals
// in shared memory (buf: 32 ints), two barriers; *total receives the sum.
__device__ int block_exclusive_scan(int v, int* buf, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inclusive = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  if (lane == 31) buf[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kTopKThreads / 32 ? buf[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += up;
    }
    buf[lane] = w;  // inclusive totals of warps 0..lane
  }
  __syncthreads();
  const int before = (warp > 0 ? buf[warp - 1] : 0) + inclusive - v;
  *total = buf[kTopKThreads / 32 - 1];
  __syncthreads();  // buf is rewritten by the next scan
  return before;
}

// One radix pass's histogram: hist[b] += the elements whose key matches `prefix` under `mask`
// and has byte b at `shift`. kTopKLoads loads per thread go out together (the scores sit in L2:
// one at a time, each pass waited ~32 round trips at 32K); warp-aggregated atomics (the lanes of
// a warp in one bin add once: one softmax's scores share their top bits, so the first pass's
// atomics would all hit one bin, one by one).
__device__ __forceinline__ void radix_histogram(const float* s, int n, uint32_t prefix,
                                                uint32_t mask, int shift, int* hist) {
  const int lane = threadIdx.x & 31;
  for (int base = 0; base < n; base += kTopKThreads * kTopKLoads) {  // uniform: whole warps
    uint32_t key[kTopKLoads];
#pragma unroll
    for (int u = 0; u < kTopKLoads; ++u) {
      const int j = base + u * kTopKThreads + static_cast<int>(threadIdx.x);
      key[u] = j < n ? order_key(s[j]) : 0u;
    }
#pragma unroll
    for (int u = 0; u < kTopKLoads; ++u) {
      const int j = base + u * kTopKThreads + static_cast<int>(threadIdx.x);
      const bool counted = j < n && (key[u] & mask) == prefix;
      const int bin = counted ? static_cast<int>((key[u] >> shift) & 255u) : 256;
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin < 256 && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
    }
  }
}

// Warp 0: the bin b holding the remaining-th largest matching element — scanning from bin 255
// down, the first whose count plus the counts above it reaches `remaining` (bin 0 if none) —
// into *bin and the count above it into *above. Lane l holds bins 8l .. 8l + 7; a suffix sum over
// the lanes finds the lane, which scans its own eight (a serial scan of 256 bins by one thread
// cost ~4 µs a pass).
__device__ __forceinline__ void radix_pick_bin(const int* hist, int remaining, int* bin,
                                               int* above) {
  const int lane = threadIdx.x & 31;
  int c[8], total = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    c[i] = hist[8 * lane + i];
    total += c[i];
  }
  int suffix = total;  // bins of lanes lane .. 31
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_down_sync(0xffffffffu, suffix, o);
    if (lane + o < 32) suffix += v;
  }
  const int above_lane = suffix - total;
  bool here = above_lane < remaining && remaining <= suffix;
  if (__ballot_sync(0xffffffffu, here) == 0 && lane == 0) here = true;  // fewer than remaining
  if (!here) return;
  int a = above_lane, b = 7;
  for (; b > 0 && a + c[b] < remaining; --b) a += c[b];
  *bin = 8 * lane + b;
  *above = a;
}

__global__ void __launch_bounds__(kTopKThreads)
    top_k_kernel(const float* scores, int n, int k, int32_t* out) {
  __shared__ int hist[256];
  __shared__ int scan_buf[32];
  __shared__ int sh_bin, sh_above;
  const float* s = scores + static_cast<int64_t>(blockIdx.x) * n;
  int32_t* o = out + static_cast<int64_t>(blockIdx.x) * k;
  uint32_t prefix = 0, mask = 0;
  int remaining = k;  // how many of the elements matching `prefix` still belong to the top-k
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    radix_histogram(s, n, prefix, mask, shift, hist);
    __syncthreads();
    if (threadIdx.x < 32) radix_pick_bin(hist, remaining, &sh_bin, &sh_above);
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh_bin) << shift;
    remaining -= sh_above;
    mask |= 255u << shift;
    __syncthreads();
  }
  // prefix is now the k-th largest key; take every larger element and the first `remaining`
  // equal ones (lowest indices), writing indices in ascending order: each thread takes a run of
  // kTopKRun consecutive elements per chunk (loaded once, together), one block scan of its
  // (larger, equal) counts places its run's picks.
  int taken = 0, equal_seen = 0;
  constexpr int kChunk = kTopKThreads * kTopKRun;
  for (int base = 0; base < n; base += kChunk) {
    const int first = base + static_cast<int>(threadIdx.x) * kTopKRun;
    uint32_t key[kTopKRun];
    int larger = 0, equal = 0;
#pragma unroll
    for (int i = 0; i < kTopKRun; ++i) {
      const int j = first + i;
      key[i] = j < n ? order_key(s[j]) : 0u;
      larger += j < n && key[i] > prefix;
      equal += j < n && key[i] == prefix;
    }
    int total = 0;
    // Both counts in one scan: a chunk holds fewer than 2^16 elements.
    const int before = block_exclusive_scan(larger | (equal << 16), scan_buf, &total);
    int eq_before = equal_seen + (before >> 16);
    int pos = taken + (before & 0xffff) + min(max(remaining - equal_seen, 0), before >> 16);
#pragma unroll
    for (int i = 0; i < kTopKRun; ++i) {
      const int j = first + i;
      if (j >= n) break;
      const bool eq = key[i] == prefix;
      if (key[i] > prefix || (eq && eq_before < remaining)) o[pos++] = j;
      eq_before += eq;
    }
    const int chunk_equal = total >> 16;
    taken += (total & 0xffff) + min(max(remaining - equal_seen, 0), chunk_equal);
    equal_seen += chunk_equal;
  }
}

// Merges the chunks' (natural-log max, sum) of one (KV head, used row, query head) into its lse:
// chunk c's row of it at partial[((c * kv_heads + h) * partial_rows + row) * 2], row = the used
// row's index i (prefix_lse_kernel's chunks: partial_rows = R), or with by_query_row its query
// row r * G + gi (the attention's splits: partial_rows = n_q * G).
__global__ void prefix_lse_merge_kernel(ScoreSumParams p, const float* partial, int chunks,
                                        int partial_rows, bool by_query_row, float* lse) {
  const int group = p.heads / p.kv_heads, R = p.n_rows_used * group;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= p.kv_heads * R) return;
  const int h = e / R, i = e % R;
  const int row = by_query_row ? p.rows_used[i / group] * group + i % group : i;
  float m = -INFINITY, l = 0.0f;
#pragma unroll 8  // the loads of eight chunks go out together (the attention's ~33 splits at 32K)
  for (int c = 0; c < chunks; ++c) {
    const float* pc =
        partial + ((static_cast<int64_t>(c) * p.kv_heads + h) * partial_rows + row) * 2;
    const float mn = fmaxf(m, pc[0]);
    if (mn == -INFINITY) continue;  // no key yet (a split past the prefix, an empty prefix)
    l = l * expf(m - mn) + pc[1] * expf(pc[0] - mn);
    m = mn;
  }
  const int r = p.rows_used[i / group], head = h * group + i % group;
  lse[r * p.heads + head] = m + logf(l);
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
    const bf16* k = p.k_cache + static_cast<int64_t>(b.slots[t]) * p.kv_heads * p.head_dim +
                    h * p.head_dim;
    float dot = 0.0f;
    for (int d = 0; d < p.head_dim; ++d) dot += __bfloat162float(q[d]) * __bfloat162float(k[d]);
    const float x = dot * p.scale, mn = fmaxf(m, x);
    l = l * expf(m - mn) + expf(x - mn);
    m = mn;
  }
  lse[r * p.heads + head] = m + logf(l);
}

// Block (sequence, KV head): its list of n_keys physical slots for this layer.
__global__ void sparse_gather_keys_kernel(int32_t* staging, const int32_t* table, int kv_heads,
                                          int layer, int page_shift) {
  namespace S = sparse_keys;
  const int32_t* e = table + blockIdx.x * S::kInts;
  if (layer < e[S::kFirstLayer]) return;
  const int h = blockIdx.y, k = e[S::kK], sel_prefix = e[S::kSelPrefix], n = e[S::kNKeys];
  const uint64_t addr = static_cast<uint32_t>(e[S::kSetsLo]) |
                        (static_cast<uint64_t>(static_cast<uint32_t>(e[S::kSetsHi])) << 32);
  const int32_t* sets = reinterpret_cast<const int32_t*>(addr) +
                        (static_cast<int64_t>(layer) * kv_heads + h) * k;
  const int32_t* pages = staging + e[S::kPagesAt];
  int32_t* out = staging + e[S::kKeysAt] + static_cast<int64_t>(h) * n;
  const int mask = (1 << page_shift) - 1;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const int slot = j < k ? sets[j] : sel_prefix + (j - k);
    out[j] = (pages[slot >> page_shift] << page_shift) | (slot & mask);
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
    prefix_lse_merge_kernel<<<(p.kv_heads * R + 255) / 256, 256, 0, stream>>>(
        p, workspace, selection_grid(p).x, R, false, lse);
    DLLM_CUDA_LAUNCH_CHECK();
  });
}

void mage_prefix_lse_from_attention(const ScoreSumParams& p, const float* prefix_ml, int splits,
                                    int n_q, float* lse, cudaStream_t stream) {
  if (splits <= 0) fail("mage_prefix_lse_from_attention: needs splits > 0 (got ", splits, ")");
  const int group = p.heads / p.kv_heads, n = p.kv_heads * p.n_rows_used * group;
  if (n == 0) return;
  prefix_lse_merge_kernel<<<(n + 255) / 256, 256, 0, stream>>>(p, prefix_ml, splits, n_q * group,
                                                               true, lse);
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

void sparse_gather_keys(int32_t* staging, const int32_t* table, int n_seqs, int kv_heads,
                        int layer, int page_shift, cudaStream_t stream) {
  if (n_seqs == 0) return;
  sparse_gather_keys_kernel<<<dim3(n_seqs, kv_heads), 256, 0, stream>>>(staging, table, kv_heads,
                                                                       layer, page_shift);
  DLLM_CUDA_LAUNCH_CHECK();
}

void mage_score_sum(const ScoreSumParams& p, cudaStream_t stream) {
  with_head_dim(p, "mage_score_sum", [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (p.n_prefix == 0 || p.n_rows_used == 0) return;
    const int threads = selection_threads(p);
    const size_t smem = kSelStages * kTileBytes<D> +
                        static_cast<size_t>(threads / 32) * kSelTile * sizeof(float) +
                        kSelBlockKeys * sizeof(int32_t);
    static const bool sized = [] {  // head_dim 128 and 256: the tiles pass the default 48 KB
      DLLM_CUDA_CHECK(cudaFuncSetAttribute(
          score_sum_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
          static_cast<int>(kSelStages * kTileBytes<D> +
                           (kSelMaxRows / 16) * kSelTile * sizeof(float) +
                           kSelBlockKeys * sizeof(int32_t))));
      return true;
    }();
    (void)sized;
    score_sum_kernel<D><<<selection_grid(p), threads, smem, stream>>>(p);
    DLLM_CUDA_LAUNCH_CHECK();
  });
}

void sparse_top_k(const float* scores, int n, int k, int kv_heads, int32_t* out,
                  cudaStream_t stream) {
  if (k <= 0 || k >= n) fail("sparse_top_k: needs 0 < k < n (got k ", k, ", n ", n, ")");
  top_k_kernel<<<kv_heads, kTopKThreads, 0, stream>>>(scores, n, k, out);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
