// Sums over a warp and over a block, shared by the row kernels (RMSNorm, LayerNorm).
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

}  // namespace dllm::cuda
