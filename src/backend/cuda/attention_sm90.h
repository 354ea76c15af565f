// The Hopper flash-attention kernel (attention_sm90.cu: wgmma, sm_90a only): same parameters,
// rules and partial-result format as the mma.sync kernel of attention.cu, which picks it for the
// shapes it serves. Built when CMake compiles for sm_90 (DLLM_HAVE_SM90A).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/attention_batch_layout.h"
#include "backend/cuda/kernels.h"

namespace dllm::cuda {

// Whether the Hopper kernel takes this shape on the current device: head_dim 128, at least 64
// rows (queries x GQA group) per KV head, a compute-capability 9.0 device, and not switched off
// with DLLM_ATTN_SM90=0 (comparisons).
bool sm90_attention_serves(int head_dim, int rows);
// Rows (queries x GQA group) one block takes, for `rows` rows per KV head.
int sm90_attention_rows_per_block(int rows);
// Keys per tile (the split granularity) of the configuration used for `rows`.
int sm90_attention_tile_keys(int rows);
// Blocks of the configuration used for `rows` that fit on one SM.
int sm90_attention_resident_blocks(int rows);
// Writes p.partial_o / p.partial_ml for p.splits key splits and, where sm90_attention_merges(p),
// merges them into p.out itself (true: no combine pass needed). The workspace's split counters
// (attention_split_counters()) must be zero.
bool sm90_attention(const AttentionParams& p, cudaStream_t stream);
// Whether the kernel merges its splits itself: the grid is one wave of blocks (at least 3/4 of
// one, all resident at once) with at most 64 splits. Its blocks then wait for each other, which
// assumes no other process's kernels hold SMs meanwhile (time-slicing is fine; MPS is not):
// DLLM_ATTN_MERGE=0 turns merging off (comparisons, or a GPU shared through MPS).
bool sm90_attention_merges(const AttentionParams& p);

// Batched calls (attention_batch.cu): the Hopper kernel over the plan's kSm90 work list, one block
// per (item, KV head) for `items` items (the capacity; padding items exit at once). Writes split
// partials for the combine pass, or with `merge` (sm90_attention_batch_merges()) merges them
// itself; a.counters must then be zero (the last block of each row block resets its pair).
void sm90_attention_batch(AttentionBatchKernelArgs a, int items, bool merge, cudaStream_t stream);
// Whether a batched call of this capacity merges its splits in the kernel: no mma.sync work, the
// Hopper grid one wave (at least 3/4 of one), as for single sequences. DLLM_ATTN_MERGE=0: never.
bool sm90_attention_batch_merges(const AttentionBatchCapacity& c, int kv_heads);
// Blocks of the batched kernel that fit on one SM.
int sm90_attention_batch_resident_blocks();

// The warp-specialised kernel (attention_ws_sm90.cu) over the plan's kSm90Ws work list: one block
// per (item, KV head) for `items` items (the capacity), each writing its rows' output (one split)
// or its split's partials for the combine pass. Same bits as the split kernel.
void sm90_ws_attention_batch(AttentionBatchKernelArgs a, int items, cudaStream_t stream);
// Whether the planner may give sequences to it: on unless DLLM_ATTN_SM90_WS=0 (comparisons).
bool sm90_ws_attention_enabled();

}  // namespace dllm::cuda
