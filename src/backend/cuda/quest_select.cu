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

// Dims [4c, 4c + 4) of one key row as floats: one 8-byte load (the row's dims are 4-aligned).
__device__ __forceinline__ float4 load_bf16x4(const bf16* at) {
  const uint2 bits = *reinterpret_cast<const uint2*>(at);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Warp w of block (b, h): page b * kPageWarps + w of KV head h. Lane l takes the dims 4l..4l+3,
// 4(l + 32).., each key row's in one 8-byte load (a warp reads a row's 256 bytes of a 128-wide
// head at once, four keys in flight): their max and min over the page's keys, then
// max_d P_d + min_d N_d summed over the warp (a partial last page: over its keys alone).
// head_dim % 4 == 0 (quest_page_scores checks).
__global__ void __launch_bounds__(kPageWarps * 32) quest_page_kernel(QuestParams p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = blockIdx.y;
  const int n_pages = (p.n_prefix + p.page_size - 1) / p.page_size;  // quest_pages()
  const int page = blockIdx.x * kPageWarps + warp;
  if (page >= n_pages) return;
  const int keys = min(p.page_size, p.n_prefix - page * p.page_size);  // the last may be partial
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * p.head_dim;
  const int first = page * p.page_size;
  const float* P = p.signs + (h * 2) * p.head_dim;
  const float* N = P + p.head_dim;
  const bf16* head = p.k_cache + h * p.head_dim;
  float sum = 0.0f;
  for (int d = 4 * lane; d < p.head_dim; d += 128) {
    float4 mx = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    float4 mn = make_float4(INFINITY, INFINITY, INFINITY, INFINITY);
#pragma unroll 4
    for (int u = 0; u < keys; ++u) {
      const float4 v = load_bf16x4(head + prefix_slot(p.prefix, first + u) * kv_row + d);
      mx = make_float4(fmaxf(mx.x, v.x), fmaxf(mx.y, v.y), fmaxf(mx.z, v.z), fmaxf(mx.w, v.w));
      mn = make_float4(fminf(mn.x, v.x), fminf(mn.y, v.y), fminf(mn.z, v.z), fminf(mn.w, v.w));
    }
    sum += mx.x * P[d] + mn.x * N[d];
    sum += mx.y * P[d + 1] + mn.y * N[d + 1];
    sum += mx.z * P[d + 2] + mn.z * N[d + 2];
    sum += mx.w * P[d + 3] + mn.w * N[d + 3];
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
  if (p.page_size <= 0)
    fail("quest_page_scores: the page size must be positive (got ", p.page_size, ")");
  if (p.head_dim % 4 != 0)
    fail("quest_page_scores: head_dim must be a multiple of 4 (got ", p.head_dim, ")");
  if (p.n_prefix == 0 || p.n_rows == 0) return;
  quest_signs_kernel<<<p.kv_heads, 128, 0, stream>>>(p);
  DLLM_CUDA_LAUNCH_CHECK();
  const int n_pages = quest_pages(p.n_prefix, p.page_size);
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
