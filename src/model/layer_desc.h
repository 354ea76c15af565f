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
enum class FfnKind {
  kDenseSwiGlu,  // down(silu(gate(x)) * up(x))
  kMoeSwiGlu,    // routed SwiGLU experts + shared experts (MoeConfig, model-specs §6.3)
};

struct AttentionDesc {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t rotary_dim = 0;  // NeoX RoPE on the first rotary_dim dims of each head (partial rotary)
  bool qkv_bias = false;   // q/k/v projections carry biases (Qwen2)
  bool qk_norm = false;    // per-head RMSNorm of q and k before RoPE (Qwen3)
  bool fused_qkv = false;  // the checkpoint ships one [Q | K | V] projection (LLaDA2.x)
};

struct LayerDesc {
  NormKind attn_norm = NormKind::kRms;
  AttentionDesc attention;
  NormKind ffn_norm = NormKind::kRms;
  FfnKind ffn = FfnKind::kDenseSwiGlu;
  int64_t intermediate_size = 0;  // kDenseSwiGlu
  MoeConfig moe;                  // kMoeSwiGlu: router, experts, shared experts
};

// The layers of every family supported today: pre-norm RMSNorm, GQA attention with the config's
// bias / q-k-norm / rotary / fused-projection choices, a dense SwiGLU FFN or (LLaDA2.x past its
// first dense layers) a mixture-of-experts FFN.
std::vector<LayerDesc> describe_layers(const ModelConfig& config);

}  // namespace dllm
