// HostKvCache: KvCache storage in host memory for the CPU backend, fp32,
// laid out [layer][slot][kv_heads * head_dim] for K and V.
#pragma once

#include <vector>

#include "kv/kv_cache.h"

namespace dllm {

class HostKvCache final : public KvCache {
 public:
  HostKvCache(int64_t num_layers, int64_t kv_dim, int64_t initial_capacity);

  float* k(int64_t layer, int64_t slot) { return &k_[layer][static_cast<size_t>(slot * kv_dim_)]; }
  float* v(int64_t layer, int64_t slot) { return &v_[layer][static_cast<size_t>(slot * kv_dim_)]; }
  int64_t kv_dim() const { return kv_dim_; }

  // dLLM-Cache (method-specs §6.3): per layer, the attention output (after o_proj) and the FFN
  // output of every canvas row, [layer][slot * hidden]; empty unless that mode ran.
  std::vector<std::vector<float>> attn_out, ffn_out;
  // S2D2: the draft forward's output-row logits (SequenceForward::retain_logits), vocab each.
  std::vector<float> kept_logits;

 private:
  void grow_storage(int64_t new_capacity) override;
  int64_t kv_dim_;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace dllm
