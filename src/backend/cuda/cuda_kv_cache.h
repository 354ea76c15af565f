// KvCache on the GPU: bf16 K and V laid out [layer][slot][kv_heads * head_dim], plus each slot's
// logical position on the device (block-causal attention reads it).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"
#include "kv/kv_cache.h"

namespace dllm::cuda {

class CudaKvCache final : public KvCache {
 public:
  CudaKvCache(int64_t num_layers, int64_t kv_dim, int64_t capacity, cudaStream_t stream);

  bf16* k(int64_t layer) { return k_.get() + layer * cap_ * kv_dim_; }
  bf16* v(int64_t layer) { return v_.get() + layer * cap_ * kv_dim_; }
  int32_t* slot_positions() { return pos_.get(); }

  // dLLM-Cache (method-specs §6.3): per layer, the attention output (after o_proj) and the FFN
  // output of every canvas row, fp32 [layers, rows, hidden]; sized by the first dLLM-Cache
  // forward of the sequence.
  DeviceBuffer<float> dllm_attn_out, dllm_ffn_out;
  // S2D2: the draft forward's output-row logits (SequenceForward::retain_logits), vocab each.
  DeviceBuffer<float> kept_logits;
  int64_t kept_rows = 0;

 private:
  void grow_storage(int64_t new_capacity) override;
  int64_t layers_, kv_dim_, cap_ = 0;
  cudaStream_t stream_;
  DeviceBuffer<bf16> k_, v_;
  DeviceBuffer<int32_t> pos_;
};

}  // namespace dllm::cuda
