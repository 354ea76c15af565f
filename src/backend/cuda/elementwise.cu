// Embedding, RMSNorm, the q/k/v post-processing (bias, q/k norm, RoPE, cache write) and SwiGLU.
#include <algorithm>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl_launch.h"

namespace dllm::cuda {

namespace {

__global__ void embed_kernel(const int32_t* tokens, const bf16* table, float* x, int hidden) {
  const int i = blockIdx.x;
  const bf16* row = table + static_cast<int64_t>(tokens[i]) * hidden;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x)
    x[static_cast<int64_t>(i) * hidden + d] = __bfloat162float(row[d]);
}

__global__ void rms_norm_kernel(const float* x, const int32_t* rows, const bf16* w, bf16* out,
                                int dim, float eps) {
  ptx::wait_for_primary_grid();  // a programmatic dependent (rms_norm() below)
  const int r = blockIdx.x;
  const float* xr = x + static_cast<int64_t>(rows ? rows[r] : r) * dim;
  float ss = 0.0f;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) ss += xr[d] * xr[d];
  const float inv = rsqrtf(block_sum(ss) / dim + eps);
  for (int d = threadIdx.x; d < dim; d += blockDim.x)
    out[static_cast<int64_t>(r) * dim + d] = __float2bfloat16(xr[d] * inv * __bfloat162float(w[d]));
}

// One block per token; one warp per head (q heads, then k heads, then v heads).
__global__ void qkv_post_kernel(QkvPostParams p) {
  extern __shared__ float buf[];  // one head_dim row per warp
  // A programmatic dependent (qkv_post() below); the attention kernel after it may be scheduled
  // now (it waits for this kernel's results itself).
  ptx::wait_for_primary_grid();
  ptx::trigger_dependent_launch();
  const int i = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  const int D = p.head_dim, total_heads = p.heads + 2 * p.kv_heads;
  const int width = total_heads * D;
  float* v = buf + warp * D;
  const float pos = static_cast<float>(p.positions[i]);
  const int slot = p.slots[i];
  if (p.slot_positions && threadIdx.x == 0) p.slot_positions[slot] = p.positions[i];
  for (int hd = warp; hd < total_heads; hd += nwarps) {
    const float* src = p.qkv + static_cast<int64_t>(i) * width + hd * D;
    for (int d = lane; d < D; d += 32) v[d] = src[d] + (p.bias ? p.bias[hd * D + d] : 0.0f);
    __syncwarp();
    const bool is_q = hd < p.heads, is_k = !is_q && hd < p.heads + p.kv_heads;
    if ((is_q || is_k) && p.q_norm) {
      float ss = 0.0f;
      for (int d = lane; d < D; d += 32) ss += v[d] * v[d];
      const float inv = rsqrtf(warp_sum(ss) / D + p.eps);
      const bf16* w = is_q ? p.q_norm : p.k_norm;
      for (int d = lane; d < D; d += 32) v[d] = v[d] * inv * __bfloat162float(w[d]);
      __syncwarp();
    }
    if (is_q || is_k) {
      const int half = p.rotary_dim / 2;
      for (int d = lane; d < half; d += 32) {
        float s, c;
        sincosf(pos * p.inv_freq[d], &s, &c);
        s *= p.rope_scale;
        c *= p.rope_scale;
        const float a = v[d], b = v[d + half];
        v[d] = a * c - b * s;
        v[d + half] = b * c + a * s;
      }
      __syncwarp();
    }
    bf16* dst;
    if (is_q) {
      dst = p.q_out + static_cast<int64_t>(i) * p.heads * D + hd * D;
    } else if (is_k) {
      dst = p.k_cache + static_cast<int64_t>(slot) * p.kv_heads * D + (hd - p.heads) * D;
    } else {
      dst =
          p.v_cache + static_cast<int64_t>(slot) * p.kv_heads * D + (hd - p.heads - p.kv_heads) * D;
    }
    for (int d = lane; d < D; d += 32) dst[d] = __float2bfloat16(v[d]);
    __syncwarp();
  }
}

__global__ void swiglu_kernel(const bf16* gu, bf16* out, int64_t n, int inter) {
  ptx::wait_for_primary_grid();  // a programmatic dependent (swiglu() below)
  const int64_t total = n * inter;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / inter, j = e % inter;
    const float g = __bfloat162float(gu[i * 2 * inter + j]);
    const float u = __bfloat162float(gu[i * 2 * inter + inter + j]);
    out[e] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  }
}

}  // namespace

void embed(const int32_t* tokens, const bf16* table, float* x, int n, int hidden,
           cudaStream_t stream) {
  if (n == 0) return;
  embed_kernel<<<n, 256, 0, stream>>>(tokens, table, x, hidden);
  DLLM_CUDA_LAUNCH_CHECK();
}

void rms_norm(const float* x, const int32_t* rows, const bf16* w, bf16* out, int n_rows, int dim,
              float eps, cudaStream_t stream) {
  if (n_rows == 0) return;
  // The small kernels between the GEMMs are programmatic dependent launches (pdl_launch.h): each
  // is scheduled as the kernel before it drains instead of after it completes.
  launch_pdl(rms_norm_kernel, dim3(n_rows), dim3(dim >= 1024 ? 1024 : 256), 0, stream, x, rows, w,
             out, dim, eps);
  DLLM_CUDA_LAUNCH_CHECK();
}

void qkv_post(const QkvPostParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  const int warps = 8;
  launch_pdl(qkv_post_kernel, dim3(p.n), dim3(warps * 32), warps * p.head_dim * sizeof(float),
             stream, p);
  DLLM_CUDA_LAUNCH_CHECK();
}

void swiglu(const bf16* gate_up, bf16* out, int n, int inter, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t total = static_cast<int64_t>(n) * inter;
  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 4096));
  launch_pdl(swiglu_kernel, dim3(blocks), dim3(256), 0, stream, gate_up, out,
             static_cast<int64_t>(n), inter);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
