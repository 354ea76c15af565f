// Quest's page scores and page expansion on the GPU (sparse_select.h: quest_page_scores,
// quest_expand_pages), checked against the CPU's quest_page_scores in
// tests/cuda/cuda_sparse_select_test.cpp. The top pages come from sparse_top_k.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sparse_select.h"

namespace dllm::cuda {
namespace {

constexpr int kPageWarps = 8;  // pages per block of the score kernel

// Block h, thread d: P_d and N_d of KV head h over every row and its G query heads, summed in
// a fixed order (deterministic).
__global__ void quest_signs_kernel(QuestParams p) {
  const int h = blockIdx.x, group = p.heads / p.kv_heads;
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float pos = 0.0f, neg = 0.0f;
    for (int r = 0; r < p.n_rows; ++r)
      for (int g = 0; g < group; ++g) {
        const float v = __bfloat162float(
            p.q[(static_cast<int64_t>(r) * p.heads + h * group + g) * p.head_dim + d]);
        pos += fmaxf(v, 0.0f);
        neg += fminf(v, 0.0f);
      }
    p.signs[(h * 2) * p.head_dim + d] = pos;
    p.signs[(h * 2 + 1) * p.head_dim + d] = neg;
  }
}

// Warp w of block (b, h): page b * kPageWarps + w of KV head h. Lane l takes dims l, l + 32, ...:
// their max and min over the page's keys (the keys' loads of a dim go out together), then
// max_d P_d + min_d N_d summed over the warp.
__global__ void __launch_bounds__(kPageWarps * 32) quest_page_kernel(QuestParams p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = blockIdx.y;
  const int n_pages = p.n_prefix / p.page_size;
  const int page = blockIdx.x * kPageWarps + warp;
  if (page >= n_pages) return;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * p.head_dim;
  const int32_t* slots = p.prefix_slots + static_cast<int64_t>(page) * p.page_size;
  const float* P = p.signs + (h * 2) * p.head_dim;
  const float* N = P + p.head_dim;
  float sum = 0.0f;
  for (int d = lane; d < p.head_dim; d += 32) {
    float mx = -INFINITY, mn = INFINITY;
    for (int u = 0; u < p.page_size; ++u) {
      const float v = __bfloat162float(p.k_cache[slots[u] * kv_row + h * p.head_dim + d]);
      mx = fmaxf(mx, v);
      mn = fminf(mn, v);
    }
    sum += mx * P[d] + mn * N[d];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const int R = p.n_rows * (p.heads / p.kv_heads);
  if (lane == 0) p.scores[static_cast<int64_t>(h) * n_pages + page] = sum / static_cast<float>(R);
}

__global__ void quest_expand_kernel(const int32_t* pages, int total, int page_size,
                                    int32_t* slots) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  slots[i] = pages[i / page_size] * page_size + i % page_size;
}

}  // namespace

void quest_page_scores(const QuestParams& p, cudaStream_t stream) {
  if (p.page_size <= 0 || p.n_prefix % p.page_size != 0)
    fail("quest_page_scores: the prefix must be whole pages (", p.n_prefix, " keys, page size ",
         p.page_size, ")");
  if (p.n_prefix == 0 || p.n_rows == 0) return;
  quest_signs_kernel<<<p.kv_heads, 128, 0, stream>>>(p);
  DLLM_CUDA_LAUNCH_CHECK();
  const int n_pages = p.n_prefix / p.page_size;
  quest_page_kernel<<<dim3((n_pages + kPageWarps - 1) / kPageWarps, p.kv_heads), kPageWarps * 32, 0,
                      stream>>>(p);
  DLLM_CUDA_LAUNCH_CHECK();
}

void quest_expand_pages(const int32_t* pages, int n_sets, int n_pages, int page_size,
                        int32_t* slots, cudaStream_t stream) {
  const int total = n_sets * n_pages * page_size;
  if (total == 0) return;
  quest_expand_kernel<<<(total + 255) / 256, 256, 0, stream>>>(pages, total, page_size, slots);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
