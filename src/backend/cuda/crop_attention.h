// The vision tower's attention over a chunk of crops: every patch of a crop sees every patch of
// that crop and none of another. One batched call (attention_batch, kernels.h) per layer for all
// the chunk's crops — a bidirectional sequence per crop, its keys the crop's own rows — instead
// of a launch per crop (1728 for a 64-frame video through SigLIP's 27 layers), and the crops'
// blocks fill the GPU together. The plans of 1..max_crops crops are the same for every layer and
// call: built and uploaded once, at construction. Batch invariance of attention_batch: a crop's
// rows are the same bits in any chunk.
#pragma once

#include <vector>

#include "backend/cuda/kernels.h"

namespace dllm::cuda {

class CropAttention {
 public:
  CropAttention(int max_crops, int rows_per_crop, int heads, int head_dim, float scale,
                cudaStream_t stream);
  // q, k, v, out: [crops * rows_per_crop, heads * head_dim], crop after crop; crops <= max_crops.
  void run(const bf16* q, const bf16* k, const bf16* v, bf16* out, int crops, cudaStream_t stream);

 private:
  AttentionBatchShape shape_;
  std::vector<AttentionBatchPlan> plans_;  // of 1, 2, ..., max_crops crops
  DeviceBuffer<int32_t> regions_;          // their staged regions, back to back
  DeviceBuffer<int32_t> positions_;        // row r: r % rows_per_crop (queries' and keys')
  DeviceBuffer<float> workspace_;
};

}  // namespace dllm::cuda
