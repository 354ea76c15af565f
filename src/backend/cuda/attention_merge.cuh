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

namespace dllm::cuda {

__device__ __forceinline__ float split_weight(float m, float l, float max_m) {
  return l > 0.0f ? l * __expf(m - max_m) : 0.0f;
}

__device__ __forceinline__ float butterfly_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kCombineThreads = 128;
// Partials of the first splits each thread loads before the weights are known, so that their
// latency overlaps the (m, l) reductions.
constexpr int kCombinePrefetch = 16;
// Weight slots: splits rounded up to 8, so that the unrolled sum below may read them with vector
// loads without going past the allocation (compute-sanitizer flagged exactly that).
__host__ __device__ constexpr int combine_weight_slots(int splits) {
  return (splits + 7) / 8 * 8;
}

// One block (kCombineThreads threads, head_dim <= kCombineThreads) merges one row: ml / po point
// at split 0 of the row, split s is `stride` rows further. The split weights are computed once,
// in parallel, into shared memory (weight, split_m: combine_weight_slots(splits) floats each;
// scratch: kCombineThreads / 32), then each thread sums its dim over the splits with independent
// loads and no exp. Measured on the H100 at 33 splits (1024 rows, head_dim 128): a per-thread
// serial pass over (m_s, l_s) was latency-bound (~30 µs); this takes ~7 µs; one thread or one
// warp per row merging online took 17-22 µs, a block per row merging online in 4 ways 11 µs.
__device__ __forceinline__ void combine_row(const float* ml, const __nv_bfloat16* po,
                                            int64_t stride, int splits, int head_dim,
                                            __nv_bfloat16* out, float* weight, float* split_m,
                                            float* scratch) {
  const int slots = combine_weight_slots(splits);
  const int d = threadIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float pre[kCombinePrefetch];
#pragma unroll
  for (int s = 0; s < kCombinePrefetch; ++s)
    pre[s] = s < splits && d < head_dim ? __bfloat162float(po[s * stride * head_dim + d]) : 0.0f;
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < slots; s += kCombineThreads) {
    const float ms = s < splits ? ml[s * stride * 2] : -INFINITY;
    split_m[s] = ms;
    weight[s] = s < splits ? ml[s * stride * 2 + 1] : 0.0f;  // l_s for now
    mx = fmaxf(mx, ms);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) scratch[warp] = mx;
  __syncthreads();  // also publishes split_m[] and l_s
#pragma unroll
  for (int w = 0; w < kCombineThreads / 32; ++w) mx = fmaxf(mx, scratch[w]);
  for (int s = threadIdx.x; s < slots; s += kCombineThreads)
    weight[s] = split_weight(split_m[s], weight[s], mx);
  __syncthreads();  // weight[] complete; scratch free again
  if (warp == 0) {
    float lane_sum = 0.0f;
    for (int s = lane; s < splits; s += 32) lane_sum += weight[s];
    lane_sum = butterfly_sum(lane_sum);
    if (lane == 0) scratch[0] = lane_sum;
  }
  __syncthreads();
  const float denom = scratch[0];
  if (d >= head_dim) return;
  float even = 0.0f, odd = 0.0f;
#pragma unroll
  for (int s = 0; s < kCombinePrefetch; s += 2) {
    if (s < splits) even = fmaf(weight[s], pre[s], even);
    if (s + 1 < splits) odd = fmaf(weight[s + 1], pre[s + 1], odd);
  }
  int s = kCombinePrefetch;
#pragma unroll 4
  for (; s + 1 < splits; s += 2) {
    even = fmaf(weight[s], __bfloat162float(po[s * stride * head_dim + d]), even);
    odd = fmaf(weight[s + 1], __bfloat162float(po[(s + 1) * stride * head_dim + d]), odd);
  }
  if (s < splits) even = fmaf(weight[s], __bfloat162float(po[s * stride * head_dim + d]), even);
  const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
  out[d] = __float2bfloat16((even + odd) * inv);
}

}  // namespace dllm::cuda
