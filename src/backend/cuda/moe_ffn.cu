// LLaDA2.x MoE FFN kernels (kernels.h): dispatch of the routed assignments by expert, a grouped
// GEMM that runs each expert only over its rows, and the weighted combine. Graph-safe (expert
// offsets stay on the device); the GEMM streams each touched expert's weights once per 8 of its
// rows, which is what decoding steps (a few rows per expert) need.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace dllm::cuda {

namespace {

// One thread per expert: count, prefix-sum (thread 0), then emit the expert's assignments in
// token order — deterministic, no atomics.
__global__ void moe_sort_kernel(const int32_t* experts, int assignments, int num_experts,
                                int32_t* offsets, int32_t* order, int32_t* position) {
  extern __shared__ int32_t counts[];
  const int e = threadIdx.x;
  if (e < num_experts) {
    int c = 0;
    for (int a = 0; a < assignments; ++a) c += experts[a] == e;
    counts[e] = c;
  }
  __syncthreads();
  if (e == 0) {
    int at = 0;
    for (int i = 0; i < num_experts; ++i) {
      const int c = counts[i];
      counts[i] = at;
      offsets[i] = at;
      at += c;
    }
    offsets[num_experts] = at;
  }
  __syncthreads();
  if (e < num_experts) {
    int at = counts[e];
    for (int a = 0; a < assignments; ++a)
      if (experts[a] == e) {
        order[at] = a;
        position[a] = at;
        ++at;
      }
  }
}

constexpr int kWarps = 8, kCols = 64, kRowsPerPass = 8, kChunk = 8, kUnroll = 4;

// 8 bf16 (one 16-byte load) as floats.
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[kChunk]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < kChunk / 2; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

// Block (expert e, kCols columns). The expert's rows go kRowsPerPass at a time through shared
// memory; warp w computes columns w, w + kWarps, ... of the block for the rows of the pass. A
// column's weights stream once per pass in 16-byte loads (the decoding steps route a few rows to
// each expert, so this is the weight-bandwidth-bound case). Each output element is the same
// arithmetic whatever else is in the batch: lane l sums k = 8l .. 8l + 7, then + 256, ... in k
// order, and the 32 lane sums meet in a fixed butterfly (batch invariant; k % 8 == 0).
__global__ void __launch_bounds__(kWarps * 32) moe_gemm_kernel(MoeGemmParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);  // [kRowsPerPass][k]
  const int e = blockIdx.x, col0 = blockIdx.y * kCols;
  const int begin = p.offsets[e], end = p.offsets[e + 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bf16* w = p.w + static_cast<int64_t>(e) * p.n_out * p.k;
  const int col_end = min(p.n_out, col0 + kCols);
  for (int a0 = begin; a0 < end; a0 += kRowsPerPass) {
    const int rows = min(kRowsPerPass, end - a0);
    __syncthreads();  // the previous pass is done with xs
    const int chunks = p.k / kChunk;
    for (int i = threadIdx.x; i < rows * chunks; i += blockDim.x) {
      const int r = i / chunks, c = i % chunks;
      const int64_t row = p.order ? p.order[a0 + r] / p.top_k : a0 + r;
      reinterpret_cast<uint4*>(xs + r * p.k)[c] =
          reinterpret_cast<const uint4*>(p.in + row * p.k)[c];
    }
    __syncthreads();
    for (int col = col0 + warp; col < col_end; col += kWarps) {
      const bf16* wc = w + static_cast<int64_t>(col) * p.k;
      float acc[kRowsPerPass];
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
      for (int kb = lane * kChunk; kb < p.k; kb += kUnroll * 32 * kChunk) {
        uint4 wv[kUnroll];  // several loads in flight before the math
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int kc = kb + u * 32 * kChunk;
          wv[u] = kc < p.k ? *reinterpret_cast<const uint4*>(wc + kc) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int kc = kb + u * 32 * kChunk;
          if (kc >= p.k) break;
          float wf[kChunk];
          unpack8(wv[u], wf);
#pragma unroll
          for (int r = 0; r < kRowsPerPass; ++r) {
            if (r >= rows) break;
            float xf[kChunk];
            unpack8(*reinterpret_cast<const uint4*>(xs + r * p.k + kc), xf);
#pragma unroll
            for (int i = 0; i < kChunk; ++i) acc[r] = fmaf(xf[i], wf[i], acc[r]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
          acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
      if (lane < rows) {  // lane r writes row r (every lane holds every row's sum)
        float v = acc[0];
#pragma unroll
        for (int r = 1; r < kRowsPerPass; ++r) v = lane == r ? acc[r] : v;
        const int64_t at = static_cast<int64_t>(a0 + lane) * p.n_out + col;
        if (p.out_f32) {
          static_cast<float*>(p.out)[at] = v;
        } else {
          static_cast<bf16*>(p.out)[at] = __float2bfloat16(v);
        }
      }
    }
  }
}

__global__ void moe_combine_kernel(const float* y, const int32_t* position, const float* weights,
                                   int top_k, int hidden, float* out, bool accumulate) {
  const int t = blockIdx.x;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float sum = accumulate ? out[static_cast<int64_t>(t) * hidden + d] : 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int a = t * top_k + j;
      sum += weights[a] * y[static_cast<int64_t>(position[a]) * hidden + d];
    }
    out[static_cast<int64_t>(t) * hidden + d] = sum;
  }
}

}  // namespace

void moe_sort(const int32_t* experts, int n, int top_k, int num_experts, int32_t* offsets,
              int32_t* order, int32_t* position, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > 1024)
    fail("moe_sort: ", num_experts, " experts (the CUDA dispatch handles 1..1024)");
  const int threads = (num_experts + 31) / 32 * 32;
  moe_sort_kernel<<<1, threads, num_experts * sizeof(int32_t), stream>>>(
      experts, n * top_k, num_experts, offsets, order, position);
  DLLM_CUDA_LAUNCH_CHECK();
}

void moe_grouped_gemm(const MoeGemmParams& p, cudaStream_t stream) {
  if (p.experts < 1 || p.n_out < 1 || p.k < 1) fail("moe_grouped_gemm: empty shape");
  if (p.k % kChunk != 0)
    fail("moe_grouped_gemm: k = ", p.k, " must be a multiple of ", kChunk, " (16-byte rows)");
  const size_t smem = size_t{kRowsPerPass} * p.k * sizeof(bf16);
  if (smem > 48 * 1024)  // the opt-in limit (k > 3072)
    DLLM_CUDA_CHECK(cudaFuncSetAttribute(moe_gemm_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(p.experts),
                  static_cast<unsigned>((p.n_out + kCols - 1) / kCols));
  moe_gemm_kernel<<<grid, kWarps * 32, smem, stream>>>(p);
  DLLM_CUDA_LAUNCH_CHECK();
}

void moe_combine(const float* y, const int32_t* position, const float* weights, int n, int top_k,
                 int hidden, float* out, bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  moe_combine_kernel<<<n, 256, 0, stream>>>(y, position, weights, top_k, hidden, out, accumulate);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
