// LLaDA2.x MoE FFN kernels (kernels.h): dispatch of the routed assignments by expert, a grouped
// GEMM that runs each expert only over its rows, and the weighted combine. A first, plain
// version: correct and graph-safe (expert offsets stay on the device); its speed against the
// bytes of the experts touched is for the benchmark to measure.
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

constexpr int kRows = 16, kCols = 64, kDepth = 32, kThreads = 256;

// Block (expert e, column tile): loops over e's rows in tiles of kRows; per k step, the input
// rows and weight columns go through shared memory. Thread (r, c) computes row r, columns
// c, c + 16, c + 32, c + 48 of the tile.
__global__ void moe_gemm_kernel(MoeGemmParams p) {
  __shared__ float a_tile[kRows][kDepth + 1];
  __shared__ float w_tile[kCols][kDepth + 1];
  const int e = blockIdx.x, col0 = blockIdx.y * kCols;
  const int tid = threadIdx.x, r = tid / 16, c = tid % 16;
  const int begin = p.offsets[e], end = p.offsets[e + 1];
  const bf16* w = p.w + static_cast<int64_t>(e) * p.n_out * p.k;
  for (int row0 = begin; row0 < end; row0 += kRows) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < p.k; k0 += kDepth) {
      for (int i = tid; i < kRows * kDepth; i += kThreads) {
        const int rr = i / kDepth, kk = i % kDepth, a = row0 + rr, kg = k0 + kk;
        float v = 0.0f;
        if (a < end && kg < p.k) {
          const int64_t row = p.order ? p.order[a] / p.top_k : a;
          v = __bfloat162float(p.in[row * p.k + kg]);
        }
        a_tile[rr][kk] = v;
      }
      for (int i = tid; i < kCols * kDepth; i += kThreads) {
        const int cc = i / kDepth, kk = i % kDepth, col = col0 + cc, kg = k0 + kk;
        w_tile[cc][kk] = col < p.n_out && kg < p.k
                             ? __bfloat162float(w[static_cast<int64_t>(col) * p.k + kg])
                             : 0.0f;
      }
      __syncthreads();
      for (int kk = 0; kk < kDepth; ++kk) {
        const float x = a_tile[r][kk];
        for (int j = 0; j < 4; ++j) acc[j] = fmaf(x, w_tile[c + 16 * j][kk], acc[j]);
      }
      __syncthreads();
    }
    const int a = row0 + r;
    if (a >= end) continue;
    for (int j = 0; j < 4; ++j) {
      const int col = col0 + c + 16 * j;
      if (col >= p.n_out) continue;
      const int64_t at = static_cast<int64_t>(a) * p.n_out + col;
      if (p.out_f32) {
        static_cast<float*>(p.out)[at] = acc[j];
      } else {
        static_cast<bf16*>(p.out)[at] = __float2bfloat16(acc[j]);
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
  const dim3 grid(static_cast<unsigned>(p.experts),
                  static_cast<unsigned>((p.n_out + kCols - 1) / kCols));
  moe_gemm_kernel<<<grid, kThreads, 0, stream>>>(p);
  DLLM_CUDA_LAUNCH_CHECK();
}

void moe_combine(const float* y, const int32_t* position, const float* weights, int n, int top_k,
                 int hidden, float* out, bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  moe_combine_kernel<<<n, 256, 0, stream>>>(y, position, weights, top_k, hidden, out, accumulate);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
