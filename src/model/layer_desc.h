// LayerDesc: what one transformer layer computes, as data (llama.cpp's build_norm / build_attn /
// build_ffn blocks, chosen per layer). A family describes its layers from its config; each backend
// has one forward that executes the list for a variable-length batch — a new kind of layer (an MoE
// FFN, another attention projection) is one more case there, never another copy of the forward.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace dllm {

enum class NormKind { kRms };
enum class FfnKind { kDenseSwiGlu };

struct AttentionDesc {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t rotary_dim = 0;  // NeoX RoPE on the first rotary_dim dims of each head (partial rotary)
  bool qkv_bias = false;   // q/k/v projections carry biases (Qwen2)
  bool qk_norm = false;    // per-head RMSNorm of q and k before RoPE (Qwen3)
};

struct LayerDesc {
  NormKind attn_norm = NormKind::kRms;
  AttentionDesc attention;
  NormKind ffn_norm = NormKind::kRms;
  FfnKind ffn = FfnKind::kDenseSwiGlu;
  int64_t intermediate_size = 0;
};

// The layers of every family supported today: pre-norm RMSNorm, GQA attention with the config's
// bias / q-k-norm / rotary choices, a dense SwiGLU FFN.
std::vector<LayerDesc> describe_layers(const ModelConfig& config);

}  // namespace dllm
