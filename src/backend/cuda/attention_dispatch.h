// What the attention files share behind kernels.h: which kernel takes a shape, the workspace
// layout, and the batched kernels' occupancy (the split rules need it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/attention_batch_layout.h"

namespace dllm::cuda {

// Whether the Hopper kernel (attention_sm90.cu) takes head_dim / rows per KV head here
// (attention.cu).
bool attention_use_sm90(int head_dim, int rows);
// fp32 (m, l) floats of `split_rows` partial rows, rounded up to 16 bytes: the bf16 O after them
// is read with 16-byte loads (attention_sm90_merge.cuh) (attention.cu).
size_t attention_partial_ml_floats(size_t split_rows);
// Blocks of the batched mma.sync kernel for head_dim that fit on one SM (attention_batch.cu).
int attention_batch_mma_resident_blocks(int head_dim);
// The grid of a batched kernel over `items` work items, and its order in a.heads_inner
// (attention_batch.cu).
dim3 attention_batch_grid(int items, AttentionBatchKernelArgs& a);

}  // namespace dllm::cuda
