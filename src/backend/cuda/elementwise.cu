// Embedding, RMSNorm, the q/k/v post-processing (bias, q/k norm, RoPE, cache write) and SwiGLU.
#include <algorithm>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl_launch.h"
#include "backend/cuda/silu.cuh"

namespace dllm::cuda {

namespace {

// Four bf16 in 8 bytes, widened or rounded (round to nearest even, as __float2bfloat16).
struct bf16x4 {
  float a, b, c, d;
};
__device__ __forceinline__ bf16x4 unpack_bf16x4(uint2 bits) {
  const auto* h = reinterpret_cast<const bf16*>(&bits);
  return {__bfloat162float(h[0]), __bfloat162float(h[1]), __bfloat162float(h[2]),
          __bfloat162float(h[3])};
}
__device__ __forceinline__ uint2 pack_bf16x4(float a, float b, float c, float d) {
  return make_uint2(ptx::pack_bf16(a, b), ptx::pack_bf16(c, d));
}

__global__ void embed_kernel(const int32_t* tokens, const bf16* table, float* x, int hidden) {
  const int i = blockIdx.x;
  const bf16* row = table + static_cast<int64_t>(tokens[i]) * hidden;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x)
    x[static_cast<int64_t>(i) * hidden + d] = __bfloat162float(row[d]);
}

// Rows whose float4 chunks fit kNormThreads x VPT stay in registers: x is read once, in 16-byte
// loads (the strided scalar loop below read it twice, 4 bytes at a time, at ~half the bandwidth).
// The block size depends on nothing but `dim`, so a row's bits do not depend on the batch.
constexpr int kNormThreads = 256;
constexpr int kNormMaxChunksPerThread = 8;  // dims up to 8192

template <int VPT>
__global__ void rms_norm_vec_kernel(const float* x, const int32_t* rows, const bf16* w, bf16* out,
                                    int dim, float eps) {
  ptx::wait_for_primary_grid();  // a programmatic dependent (rms_norm() below)
  const int r = blockIdx.x, chunks = dim / 4;
  const auto* xr =
      reinterpret_cast<const float4*>(x + static_cast<int64_t>(rows ? rows[r] : r) * dim);
  float4 v[VPT];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int c = threadIdx.x + i * kNormThreads;
    v[i] = c < chunks ? xr[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
  }
  const float inv = rsqrtf(block_sum(ss) / dim + eps);
  const auto* w4 = reinterpret_cast<const uint2*>(w);
  auto* out4 = reinterpret_cast<uint2*>(out + static_cast<int64_t>(r) * dim);
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int c = threadIdx.x + i * kNormThreads;
    if (c >= chunks) break;
    const bf16x4 wc = unpack_bf16x4(w4[c]);
    out4[c] = pack_bf16x4(v[i].x * inv * wc.a, v[i].y * inv * wc.b, v[i].z * inv * wc.c,
                          v[i].w * inv * wc.d);
  }
}

// Any dim (the tests' odd sizes, dims beyond the register path).
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

// One block per token. The token's whole q|k|v row (plus bias) is first staged into shared
// memory by every thread at once (16-byte loads, all in flight together: one warp per head loading
// as it went left each warp waiting on one load at a time), and its RoPE angles are computed once
// for all heads. Then one warp per head (q heads, then k heads, then v heads): q/k RMSNorm, RoPE,
// the bf16 write. Needs head_dim % 4 == 0 (every supported head size).
__global__ void qkv_post_kernel(QkvPostParams p) {
  extern __shared__ float4 smem4[];
  // A programmatic dependent (qkv_post() below); the attention kernel after it may be scheduled
  // now (it waits for this kernel's results itself).
  ptx::wait_for_primary_grid();
  ptx::trigger_dependent_launch();
  const int i = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  const int D = p.head_dim, half = p.rotary_dim / 2, total_heads = p.heads + 2 * p.kv_heads;
  const int width = total_heads * D;
  float* row = reinterpret_cast<float*>(smem4);  // [width], then cos and sin [half] each
  float* cos_t = row + width;
  float* sin_t = cos_t + half;
  const auto* src = reinterpret_cast<const float4*>(p.qkv + static_cast<int64_t>(i) * width);
  const auto* bias = reinterpret_cast<const float4*>(p.bias);
  for (int c = threadIdx.x; c < width / 4; c += blockDim.x) {
    float4 x = src[c];
    if (bias) {
      const float4 b = bias[c];
      x = make_float4(x.x + b.x, x.y + b.y, x.z + b.z, x.w + b.w);
    }
    smem4[c] = x;
  }
  const float pos = static_cast<float>(p.positions[i]);
  const int slot = p.slots[i];
  if (p.slot_positions && threadIdx.x == 0) p.slot_positions[slot] = p.positions[i];
  for (int d = threadIdx.x; d < half; d += blockDim.x) {
    float s, c;
    sincosf(pos * p.inv_freq[d], &s, &c);
    cos_t[d] = c * p.rope_scale;
    sin_t[d] = s * p.rope_scale;
  }
  __syncthreads();
  for (int hd = warp; hd < total_heads; hd += nwarps) {
    float* v = row + hd * D;
    const bool is_q = hd < p.heads, is_k = !is_q && hd < p.heads + p.kv_heads;
    if ((is_q || is_k) && p.q_norm) {
      float ss = 0.0f;
      for (int d = 4 * lane; d < D; d += 128) {
        const float4 x = *reinterpret_cast<const float4*>(v + d);
        ss += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
      }
      const float inv = rsqrtf(warp_sum(ss) / D + p.eps);
      const bf16* w = is_q ? p.q_norm : p.k_norm;
      for (int d = 4 * lane; d < D; d += 128) {  // this lane's own dims: no sync needed
        float4& x = *reinterpret_cast<float4*>(v + d);
        const bf16x4 wc = unpack_bf16x4(*reinterpret_cast<const uint2*>(w + d));
        x = make_float4(x.x * inv * wc.a, x.y * inv * wc.b, x.z * inv * wc.c, x.w * inv * wc.d);
      }
      __syncwarp();  // RoPE pairs dims held by different lanes
    }
    if (is_q || is_k) {
      for (int d = lane; d < half; d += 32) {
        const float c = cos_t[d], s = sin_t[d];
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
    for (int d = 4 * lane; d < D; d += 128) {
      const float4 x = *reinterpret_cast<const float4*>(v + d);
      *reinterpret_cast<uint2*>(dst + d) = pack_bf16x4(x.x, x.y, x.z, x.w);
    }
  }
}

// Eight outputs per thread in 16-byte loads and stores (inter % 8 == 0, every real FFN width).
// `chunks` = n * inter / 8 fits 32 bits (checked by the launcher), so the row index is a 32-bit
// division (a 64-bit one per element cost more than the memory traffic).
__global__ void swiglu_vec_kernel(const bf16* gu, bf16* out, uint32_t chunks, uint32_t row_chunks) {
  ptx::wait_for_primary_grid();  // a programmatic dependent (swiglu() below)
  for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < chunks;
       e += gridDim.x * blockDim.x) {
    const uint32_t i = e / row_chunks, j = e - i * row_chunks;
    const auto* row = reinterpret_cast<const uint4*>(gu) + static_cast<int64_t>(i) * 2 * row_chunks;
    const uint4 g8 = row[j], u8 = row[row_chunks + j];
    const auto* g = reinterpret_cast<const bf16*>(&g8);
    const auto* u = reinterpret_cast<const bf16*>(&u8);
    uint4 o;
    auto* ob = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      ob[k] = ptx::pack_bf16(
          silu_times(__bfloat162float(g[2 * k]), __bfloat162float(u[2 * k])),
          silu_times(__bfloat162float(g[2 * k + 1]), __bfloat162float(u[2 * k + 1])));
    reinterpret_cast<uint4*>(out)[e] = o;
  }
}

__global__ void swiglu_kernel(const bf16* gu, bf16* out, int64_t n, int inter) {
  ptx::wait_for_primary_grid();  // a programmatic dependent (swiglu() below)
  const int64_t total = n * inter;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / inter, j = e % inter;
    out[e] = __float2bfloat16(silu_times(__bfloat162float(gu[i * 2 * inter + j]),
                                         __bfloat162float(gu[i * 2 * inter + inter + j])));
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
  const int chunks_per_thread = (dim / 4 + kNormThreads - 1) / kNormThreads;
  if (dim % 4 != 0 || chunks_per_thread > kNormMaxChunksPerThread) {
    launch_pdl(rms_norm_kernel, dim3(n_rows), dim3(dim >= 1024 ? 1024 : 256), 0, stream, x, rows, w,
               out, dim, eps);
  } else {
    auto kernel = chunks_per_thread <= 1   ? rms_norm_vec_kernel<1>
                  : chunks_per_thread <= 2 ? rms_norm_vec_kernel<2>
                  : chunks_per_thread <= 4 ? rms_norm_vec_kernel<4>
                                           : rms_norm_vec_kernel<kNormMaxChunksPerThread>;
    launch_pdl(kernel, dim3(n_rows), dim3(kNormThreads), 0, stream, x, rows, w, out, dim, eps);
  }
  DLLM_CUDA_LAUNCH_CHECK();
}

void qkv_post(const QkvPostParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  if (p.head_dim % 4 != 0) fail("qkv_post: head_dim must be a multiple of 4, got ", p.head_dim);
  // The staged row and the RoPE table; 96 KB holds a 100B-class model's q|k|v row with room.
  constexpr size_t kMaxSmem = 96 * 1024;
  const size_t smem =
      (static_cast<size_t>(p.heads + 2 * p.kv_heads) * p.head_dim + p.rotary_dim) * sizeof(float);
  if (smem > kMaxSmem) fail("qkv_post: a token's q|k|v row of ", smem, " bytes exceeds ", kMaxSmem);
  if (smem > 48 * 1024)  // the opt-in limit (e.g. LLaDA-8B's 96 full heads of 128)
    DLLM_CUDA_CHECK(cudaFuncSetAttribute(
        qkv_post_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int warps = 8;
  launch_pdl(qkv_post_kernel, dim3(p.n), dim3(warps * 32), smem, stream, p);
  DLLM_CUDA_LAUNCH_CHECK();
}

void swiglu(const bf16* gate_up, bf16* out, int n, int inter, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t total = static_cast<int64_t>(n) * inter;
  const int threads = 256;
  if (inter % 8 == 0 && total / 8 <= INT32_MAX) {
    const int64_t chunks = total / 8;
    const int blocks = static_cast<int>(std::min<int64_t>((chunks + threads - 1) / threads, 8192));
    launch_pdl(swiglu_vec_kernel, dim3(blocks), dim3(threads), 0, stream, gate_up, out,
               static_cast<uint32_t>(chunks), static_cast<uint32_t>(inter / 8));
  } else {
    const int blocks = static_cast<int>(std::min<int64_t>((total + threads - 1) / threads, 4096));
    launch_pdl(swiglu_kernel, dim3(blocks), dim3(threads), 0, stream, gate_up, out,
               static_cast<int64_t>(n), inter);
  }
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
