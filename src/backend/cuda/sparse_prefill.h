// The CUDA executor of a sparse prefill plan (attention/sparse_prefill_plan.h): one kernel core
// (sparse_prefill.cu) whose variants are the plan's index sources (contiguous, strided and
// gathered key spans; explicit query rows) and mask rules (causal or block-causal, per-span
// window), on the mma.sync tile math the dense flash kernel uses (mma_tile.cuh, flash_tile.cuh).
#pragma once

#include <cstdint>

#include "attention/sparse_prefill_plan.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"

namespace dllm::cuda {

// A tile of the flattened plan: its query head and its ranges in rows / spans.
struct SparseTileDesc {
  int32_t head, first_row, row_count, first_span, span_count;
};

// A plan on the device: every head's tiles in one list (rows, spans and key maps rebased).
struct DeviceSparsePlan {
  DeviceBuffer<SparseTileDesc> tiles;
  DeviceBuffer<int32_t> rows;
  DeviceBuffer<KeySpan> spans;
  DeviceBuffer<int32_t> key_map;
  int32_t n_tiles = 0, n_tokens = 0, block_size = 1, heads = 0;
};

DeviceSparsePlan upload_sparse_plan(const SparsePrefillPlan& plan);
// The same into `into`'s buffers (grown, never shrunk), copied on `stream` (the forward's: a plan
// per layer, each copy ordered after the previous layer's kernel that read the buffers).
void upload_sparse_plan(const SparsePrefillPlan& plan, DeviceSparsePlan& into, cudaStream_t stream);

// q, out: [n_tokens, heads, head_dim]; k, v: [*, kv_heads, head_dim], bf16; head_dim 16, 32, 64 or
// 128; plan.heads == heads. Key c of the plan is row key_slots[c] of k / v (a sequence's physical
// slots in the forward's paged pool), or row c without key_slots. Softmax scale 1 / sqrt(head_dim).
void sparse_prefill_attention(const DeviceSparsePlan& plan, const bf16* q, const bf16* k,
                              const bf16* v, int heads, int kv_heads, int head_dim, bf16* out,
                              cudaStream_t stream, const int32_t* key_slots = nullptr);

// dst[i, :] = src[slots[i], :] for i < n (dim bf16 each): a sequence's K rows out of the pool,
// for the online estimation on the host.
void gather_rows_bf16(const bf16* src, const int32_t* slots, bf16* dst, int n, int dim,
                      cudaStream_t stream);

}  // namespace dllm::cuda
