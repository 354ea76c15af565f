// Sparse attention's selection on the GPU (method-specs §1.6 steps 2 and 3), as standalone
// kernels checked against the CPU reference (backend/cpu/sparse_select.h) in
// tests/cuda/cuda_sparse_select_test.cpp. Not yet wired into the CUDA forward, which refuses
// sparse requests (cuda_forward_plan.cpp); what is missing is listed in the issue notes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dllm::cuda {

using bf16 = __nv_bfloat16;

// MAGE's score-sum (§1.6 step 2): for every KV head h and prefix key j,
//   scores[h, j] = mean over the used rows r and the G query heads g of h of
//                  exp(q[r, g] . k[j] * scale - lse[r, g])
// where lse is each row's natural-log log-sum-exp of its scaled scores over the prefix keys
// only — what the exact pass's prefix partition holds — so K is read once more, not twice.
struct ScoreSumParams {
  const bf16* q = nullptr;                // [rows, heads * head_dim], after RoPE
  const float* lse = nullptr;             // [rows, heads]
  const bf16* k_cache = nullptr;          // one layer of the pool: [slots, kv_heads * head_dim]
  const int32_t* prefix_slots = nullptr;  // [n_prefix]: physical slot of each prefix key
  const int32_t* rows_used = nullptr;     // [n_rows_used]: the block rows averaged over
  float* scores = nullptr;                // [kv_heads, n_prefix]
  int n_rows_used = 0, n_prefix = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
};
void mage_score_sum(const ScoreSumParams& p, cudaStream_t stream);

// Top-k per KV head (§1.6 step 3): out[h, 0..k) = the indices of the k largest scores[h, :]
// (ties to the lower index, as top_k_indices), ascending. A radix select over the scores' bits
// (four 8-bit passes), then one ordered compaction pass. Needs 0 < k < n.
void sparse_top_k(const float* scores, int n, int k, int kv_heads, int32_t* out,
                  cudaStream_t stream);

}  // namespace dllm::cuda
