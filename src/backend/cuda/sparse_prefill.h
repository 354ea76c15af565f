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

// q, out: [n_tokens, heads, head_dim]; k, v: [n_tokens, kv_heads, head_dim], bf16; head_dim 64
// or 128; plan.heads == heads. Softmax scale 1 / sqrt(head_dim).
void sparse_prefill_attention(const DeviceSparsePlan& plan, const bf16* q, const bf16* k,
                              const bf16* v, int heads, int kv_heads, int head_dim, bf16* out,
                              cudaStream_t stream);

}  // namespace dllm::cuda
