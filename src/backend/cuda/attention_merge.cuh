// The merge of one row's split partials (flash_tile.cuh's write_split_partials: (m, l) in fp32,
// O / l in bf16) into its output: out = sum_s w_s (O_s / l_s) / sum_s w_s, w_s = l_s e^(m_s - M).
//
// Batch invariance needs every path that merges a row to do the same arithmetic in the same
// order, bit for bit: the combine passes (combine_row below, one thread per dim) and the Hopper
// kernel's in-kernel merge (attention_sm90_merge.cuh: two half-warps take the even and the odd
// splits). The order, fixed here:
//   M      = max_s m_s                                  (exact in any order)
//   w_s    = split_weight(m_s, l_s, M)
//   denom  = lane i (of 32) sums w_s over s = i, i + 32, ... in increasing s from 0, then the
//            lanes are summed by butterfly_sum (xor 16, 8, 4, 2, 1)
//   acc[d] = even + odd, each an fmaf chain fmaf(w_s, O_s[d], acc) over its splits in increasing s
//   out[d] = bf16_rn(acc[d] * (denom > 0 ? 1 / denom : 0))   (a row that sees nothing: zeros)
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace dllm::cuda {

__device__ __forceinline__ float split_weight(float m, float l, float max_m) {
  return l > 0.0f ? l * __expf(m - max_m) : 0.0f;
}

__device__ __forceinline__ float butterfly_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The combine pass: one block per row, two threads per dim — one sums the even splits, one the
// odd (the order above), so each thread's chain of dependent loads is half as long.
constexpr int kCombineDims = 128;  // head_dim at most
constexpr int kCombineThreads = 2 * kCombineDims;
// Partials of the first splits loaded before the weights are known, so that their latency
// overlaps the (m, l) reductions (half of them per thread).
constexpr int kCombinePrefetch = 16;
// Weight slots: splits rounded up to 8, so that the unrolled sum below may read them with vector
// loads without going past the allocation (compute-sanitizer flagged exactly that).
__host__ __device__ constexpr int combine_weight_slots(int splits) {
  return (splits + 7) / 8 * 8;
}

// Shared memory of combine_row beyond the weights.
struct CombineScratch {
  float warp_max[kCombineThreads / 32];
  float denom;
  float odd[kCombineDims];
};

// One block (kCombineThreads threads) merges one row of head_dim <= kCombineDims: ml / po point
// at split 0 of the row, split s is `stride` rows further. The split weights are computed once,
// in parallel, into shared memory (weight, split_m: combine_weight_slots(splits) floats each),
// then each thread sums its dim over its splits with independent loads and no exp. Measured on
// the H100 at 33 splits (1024 rows, head_dim 128): a per-thread serial pass over (m_s, l_s) was
// latency-bound (~30 µs); one thread per dim ~7 µs; one thread or one warp per row merging online
// took 17-22 µs, a block per row merging online in 4 ways 11 µs.
__device__ __forceinline__ void combine_row(const float* ml, const __nv_bfloat16* po,
                                            int64_t stride, int splits, int head_dim,
                                            __nv_bfloat16* out, float* weight, float* split_m,
                                            CombineScratch& scratch) {
  const int slots = combine_weight_slots(splits);
  const int d = threadIdx.x % kCombineDims, parity = threadIdx.x / kCombineDims;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool has_dim = d < head_dim;
  auto partial = [&](int s) { return __bfloat162float(po[s * stride * head_dim + d]); };
  float pre[kCombinePrefetch / 2];
#pragma unroll
  for (int i = 0; i < kCombinePrefetch / 2; ++i)
    pre[i] = parity + 2 * i < splits && has_dim ? partial(parity + 2 * i) : 0.0f;
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < slots; s += kCombineThreads) {
    const float ms = s < splits ? ml[s * stride * 2] : -INFINITY;
    split_m[s] = ms;
    weight[s] = s < splits ? ml[s * stride * 2 + 1] : 0.0f;  // l_s for now
    mx = fmaxf(mx, ms);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) scratch.warp_max[warp] = mx;
  __syncthreads();  // also publishes split_m[] and l_s
#pragma unroll
  for (int w = 0; w < kCombineThreads / 32; ++w) mx = fmaxf(mx, scratch.warp_max[w]);
  for (int s = threadIdx.x; s < slots; s += kCombineThreads)
    weight[s] = split_weight(split_m[s], weight[s], mx);
  __syncthreads();  // weight[] complete
  if (warp == 0) {
    float lane_sum = 0.0f;
    for (int s = lane; s < splits; s += 32) lane_sum += weight[s];
    lane_sum = butterfly_sum(lane_sum);
    if (lane == 0) scratch.denom = lane_sum;
  }
  float acc = 0.0f;  // the even (parity 0) or odd splits' sum, in increasing s
#pragma unroll
  for (int i = 0; i < kCombinePrefetch / 2; ++i)
    if (parity + 2 * i < splits) acc = fmaf(weight[parity + 2 * i], pre[i], acc);
  if (has_dim) {
#pragma unroll 8
    for (int s = parity + kCombinePrefetch; s < splits; s += 2)
      acc = fmaf(weight[s], partial(s), acc);
  }
  if (parity == 1) scratch.odd[d] = acc;
  __syncthreads();  // odd sums and the denominator
  if (parity == 0 && has_dim) {
    const float denom = scratch.denom;
    const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
    out[d] = __float2bfloat16((acc + scratch.odd[d]) * inv);
  }
}

// V consecutive bf16 (2V-byte aligned) in one load, still packed: a split's share of a row is
// requested long before it is summed, and packed it holds half the registers.
template <int V>
using Bf16Pack = std::conditional_t<
    V == 1, unsigned short,
    std::conditional_t<V == 2, uint32_t, std::conditional_t<V == 4, uint2, uint4>>>;

template <int V>
__device__ __forceinline__ Bf16Pack<V> load_bf16_pack(const __nv_bfloat16* src) {
  return *reinterpret_cast<const Bf16Pack<V>*>(src);
}

template <int V>
__device__ __forceinline__ void unpack_bf16s(const Bf16Pack<V>& bits, float (&f)[V]) {
  const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&bits);
#pragma unroll
  for (int i = 0; i < V; ++i) f[i] = __bfloat162float(b[i]);
}

// Splits combine_row_warp() takes at most: eight per lane.
constexpr int kWarpCombineMaxSplits = 256;

// The same merge by one warp per row, for up to kWarpCombineMaxSplits splits (the batched call's
// combine, and the single-sequence one when its splits fit): rows are independent warps, so a big
// batch's ~100K rows cost ~100K warps, not blocks, and few splits cost no block-wide barriers.
// Lane l takes splits s = l, l + 32, ... for the maximum and the weights, then half h = l / 16
// takes the splits of parity h for dims [V (l % 16), +V), V = head_dim / 16; the halves' sums
// meet by one shuffle. `weight`: the warp's scratch, one float per split.
//
// The partials of the half's first eight splits are requested together with the (m, l) they are
// weighted by, so that a row of at most 16 splits (every row of a big batch) costs one memory
// round trip, not two: the pass is latency-bound there (H100, 128 x 32 queries x 1K keys, 3
// splits: ~130K rows, one warp each; docs/benchmarks.md, 2026-11-25).
template <int V>
__device__ __forceinline__ void combine_row_warp(const float* ml, const __nv_bfloat16* po,
                                                 int64_t stride, int splits, __nv_bfloat16* out,
                                                 float* weight) {
  constexpr int D = 16 * V;
  constexpr int kPerLane = kWarpCombineMaxSplits / 32;
  constexpr int kRound = 8;  // splits of a half whose loads go out together
  const int lane = threadIdx.x & 31, half = lane >> 4, c = lane & 15;
  const __nv_bfloat16* p = po + c * V;
  float2 ms[kPerLane];  // (m_s, l_s) of s = lane + 32 k, all requested at once
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int s = lane + 32 * k;
    ms[k] = s < splits ? *reinterpret_cast<const float2*>(ml + s * stride * 2)
                       : make_float2(-INFINITY, 0.0f);
  }
  Bf16Pack<V> f[kRound];  // splits base + 2 k of the current round, base = half first
#pragma unroll
  for (int k = 0; k < kRound; ++k) {
    const int s = half + 2 * k;
    f[k] = s < splits ? load_bf16_pack<V>(p + s * stride * D) : Bf16Pack<V>{};
  }
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) mx = fmaxf(mx, ms[k].x);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float lane_sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int s = lane + 32 * k;
    if (s < splits) {
      const float w = split_weight(ms[k].x, ms[k].y, mx);
      weight[s] = w;
      lane_sum += w;
    }
  }
  const float denom = butterfly_sum(lane_sum);
  __syncwarp();  // weight[] complete
  float acc[V] = {};
  // The sums in increasing split order, a round of the half's splits at a time.
  for (int base = half; base < splits; base += 2 * kRound) {
    if (base != half) {
#pragma unroll
      for (int k = 0; k < kRound; ++k) {
        const int s = base + 2 * k;
        f[k] = s < splits ? load_bf16_pack<V>(p + s * stride * D) : Bf16Pack<V>{};
      }
    }
#pragma unroll
    for (int k = 0; k < kRound; ++k) {
      const int s = base + 2 * k;
      if (s < splits) {
        const float w = weight[s];
        float x[V];
        unpack_bf16s<V>(f[k], x);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = fmaf(w, x[i], acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 16);
  if (half == 0) {
    const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) out[c * V + i] = __float2bfloat16(acc[i] * inv);
  }
  __syncwarp();  // weight[] is rewritten for the warp's next row
}

// Warps (rows) per block of a warp-per-row combine over `rows` rows: as many as keep at least two
// blocks per SM, at most 8. Few rows with many splits are latency-bound loads: one row per SM
// then (H100, 128 rows x 99 splits: 16 eight-warp blocks were ~12 µs slower than 128 blocks).
inline int combine_warps(int64_t rows, int sms) {
  int w = 8;
  while (w > 1 && (rows + w - 1) / w < 2 * sms) w /= 2;
  return w;
}

}  // namespace dllm::cuda
