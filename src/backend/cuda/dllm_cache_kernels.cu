// Row kernels of forwards that recompute a subset of rows (cuda_layers.cpp): scattering the
// recomputed rows' outputs into dLLM-Cache's kept outputs, adding outputs to the residual stream
// (all of it, or chosen rows), and the value-similarity score that picks which response rows
// dLLM-Cache refreshes.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace dllm::cuda {

namespace {

__global__ void scatter_rows_kernel(const float* src, const int32_t* rows, float* dst, int dim) {
  const int i = blockIdx.x;
  float* d = dst + static_cast<int64_t>(rows[i]) * dim;
  const float* s = src + static_cast<int64_t>(i) * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) d[j] = s[j];
}

__global__ void add_rows_kernel(const float* src, const int32_t* rows, float* x, int dim) {
  const int i = blockIdx.x;
  float* d = x + static_cast<int64_t>(rows[i]) * dim;
  const float* s = src + static_cast<int64_t>(i) * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) d[j] += s[j];
}

__global__ void add_inplace_kernel(float* x, const float* a, int64_t n) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[e] += a[e];
}

// One block per response row: cosine similarity (double sums, as the CPU reference) between the
// new V (fp32 GEMM output + bias) and the cached one, then the new V goes into the cache.
__global__ void value_similarity_kernel(const float* v_new, const float* bias, bf16* v_cache,
                                        const int32_t* slots, float* sim, int kvd) {
  __shared__ double red[3][32];
  const int g = blockIdx.x;
  const float* a = v_new + static_cast<int64_t>(g) * kvd;
  bf16* b = v_cache + static_cast<int64_t>(slots[g]) * kvd;
  double ab = 0, aa = 0, bb = 0;
  for (int i = threadIdx.x; i < kvd; i += blockDim.x) {
    const double x = a[i] + (bias ? bias[i] : 0.0f);
    const double y = __bfloat162float(b[i]);
    ab += x * y;
    aa += x * x;
    bb += y * y;
  }
  for (int o = 16; o > 0; o >>= 1) {
    ab += __shfl_xor_sync(0xffffffffu, ab, o);
    aa += __shfl_xor_sync(0xffffffffu, aa, o);
    bb += __shfl_xor_sync(0xffffffffu, bb, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    red[0][warp] = ab;
    red[1][warp] = aa;
    red[2][warp] = bb;
  }
  __syncthreads();  // every thread has read the old V before it is overwritten below
  if (threadIdx.x == 0) {
    double s0 = 0, s1 = 0, s2 = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
      s0 += red[0][w];
      s1 += red[1][w];
      s2 += red[2][w];
    }
    // torch cosine_similarity: x.y / max(|x| |y|, eps), eps = 1e-8
    sim[g] = static_cast<float>(s0 / fmax(sqrt(s1) * sqrt(s2), 1e-8));
  }
  for (int i = threadIdx.x; i < kvd; i += blockDim.x)
    b[i] = __float2bfloat16(a[i] + (bias ? bias[i] : 0.0f));
}

}  // namespace

void scatter_rows(const float* src, const int32_t* rows, float* dst, int m, int dim,
                  cudaStream_t stream) {
  if (m == 0) return;
  scatter_rows_kernel<<<m, 256, 0, stream>>>(src, rows, dst, dim);
  DLLM_CUDA_LAUNCH_CHECK();
}

void add_rows(const float* src, const int32_t* rows, float* x, int m, int dim,
              cudaStream_t stream) {
  if (m == 0) return;
  add_rows_kernel<<<m, 256, 0, stream>>>(src, rows, x, dim);
  DLLM_CUDA_LAUNCH_CHECK();
}

void add_inplace(float* x, const float* a, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  add_inplace_kernel<<<blocks, 256, 0, stream>>>(x, a, n);
  DLLM_CUDA_LAUNCH_CHECK();
}

void value_similarity(const float* v_new, const float* bias, bf16* v_cache, const int32_t* slots,
                      float* sim, int g, int kvd, cudaStream_t stream) {
  if (g == 0) return;
  value_similarity_kernel<<<g, 256, 0, stream>>>(v_new, bias, v_cache, slots, sim, kvd);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
