// Head-averaged attention probability rows (d2Cache's attention rollout, method-specs §4.5):
// out[i, slot(j)] = (1 / heads) sum_h softmax_j(q_ih . k_j * scale) for every query row i and key
// j of a bidirectional forward. One block per query row; the scores of one head live in shared
// memory (n_keys floats), so a row costs heads x (two passes over the keys); each key column is
// owned by one thread, so the head average needs no atomics.
#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace dllm::cuda {

namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ float block_reduce(float v, float* red, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // red[] may still be read by the previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kRowThreads / 32 ? red[lane] : (is_max ? -FLT_MAX : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  return red[0];
}

__global__ void attention_rows_kernel(AttentionRowsParams p) {
  extern __shared__ float scores[];  // [n_keys]
  __shared__ float red[32];
  const int i = blockIdx.x;
  const int group = p.heads / p.kv_heads;
  const int kv_dim = p.kv_heads * p.head_dim;
  float* out = p.out + static_cast<size_t>(i) * p.width;
  const float inv_heads = 1.0f / static_cast<float>(p.heads);
  for (int h = 0; h < p.heads; ++h) {
    const bf16* q = p.q + (static_cast<size_t>(i) * p.heads + h) * p.head_dim;
    const int g = h / group;
    float mx = -FLT_MAX;
    for (int j = threadIdx.x; j < p.n_keys; j += kRowThreads) {
      const int slot = p.key_slots ? p.key_slots[j] : j;
      const bf16* k = p.k_cache + static_cast<size_t>(slot) * kv_dim + g * p.head_dim;
      float s = 0.0f;
      for (int d = 0; d < p.head_dim; ++d) s += __bfloat162float(q[d]) * __bfloat162float(k[d]);
      s *= p.scale;
      scores[j] = s;
      mx = fmaxf(mx, s);
    }
    mx = block_reduce(mx, red, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < p.n_keys; j += kRowThreads) {
      const float e = __expf(scores[j] - mx);
      scores[j] = e;
      sum += e;
    }
    sum = block_reduce(sum, red, false);
    const float inv = inv_heads / sum;
    for (int j = threadIdx.x; j < p.n_keys; j += kRowThreads) {
      const int slot = p.key_slots ? p.key_slots[j] : j;
      out[slot] += scores[j] * inv;
    }
  }
}

}  // namespace

size_t attention_rows_max_keys() { return (48 * 1024) / sizeof(float); }

void attention_rows(const AttentionRowsParams& p, cudaStream_t stream) {
  if (p.n_q <= 0 || p.n_keys <= 0) return;
  const size_t smem = static_cast<size_t>(p.n_keys) * sizeof(float);
  attention_rows_kernel<<<p.n_q, kRowThreads, smem, stream>>>(p);
  DLLM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dllm::cuda
