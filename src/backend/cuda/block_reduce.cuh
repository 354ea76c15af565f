// Sums over a warp and over a block, shared by the row kernels (RMSNorm, LayerNorm), and the
// block's exclusive prefix sum of integer counts (the top-k's and the MoE sort's).
#pragma once

namespace dllm::cuda {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over a block of blockDim.x (a multiple of 32, <= 1024) threads; every thread gets it.
__device__ inline float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nw = blockDim.x >> 5;
  v = threadIdx.x < nw ? part[threadIdx.x] : 0.0f;
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) part[0] = v;
  __syncthreads();
  return part[0];
}

// A warp's __shfl_up_sync of an int (block_exclusive_scan's other types bring their own).
__device__ __forceinline__ int warp_shfl_up(int v, int by) {
  return __shfl_up_sync(0xffffffffu, v, by);
}

// The block's exclusive prefix sum of v in thread order (blockDim.x a multiple of 32, at most
// 1024): warp shuffles, the warps' totals in `warp_totals` (shared memory, blockDim.x / 32
// elements), two barriers; *total receives the block's sum. T: int, or a struct of integer sums
// with +, - and warp_shfl_up(T, by) — exact, so the order of the additions does not matter.
template <class T>
__device__ T block_exclusive_scan(T v, T* warp_totals, T* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  T inclusive = v;
#pragma unroll
  for (int by = 1; by < 32; by <<= 1) {
    const T up = warp_shfl_up(inclusive, by);
    if (lane >= by) inclusive = inclusive + up;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  T before = inclusive - v, sum{};
  for (int w = 0; w < warps; ++w) {
    const T t = warp_totals[w];
    if (w < warp) before = before + t;
    sum = sum + t;
  }
  *total = sum;
  __syncthreads();  // warp_totals may be rewritten by the next scan
  return before;
}

}  // namespace dllm::cuda
