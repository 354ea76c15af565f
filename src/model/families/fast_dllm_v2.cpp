// Fast-dLLM v2 (NVlabs): Qwen2.5 layers (qkv bias hard-coded in the modeling), block-causal with
// bd_size 32, right-shifted logits, mask |<MASK>| 151665. model-specs §3.
#include "model/families/config_reader.h"

namespace dllm {
namespace {

ModelConfig parse_fast_dllm_v2(const nlohmann::json& j, const std::string& source) {
  ConfigReader r(j, source);
  ModelConfig c;
  read_qwen_style_config(r, c);
  c.family = "fast_dllm_v2";
  c.qkv_bias = true;  // Fast_dLLM_QwenAttention builds q/k/v with bias=True regardless of config
  c.qk_norm = false;
  c.attention = AttentionKind::kBlockCausal;
  c.block_size = r.get_int("bd_size", 32);
  c.shifted_logits = true;
  c.mask_token_id = r.get_token_id("mask_token_id", 151665);
  return c;
}

}  // namespace

const Family kFastDllmV2Family{
    .name = "fast_dllm_v2",
    .description =
        "Fast-dLLM v2 block diffusion (Qwen2.5 layers, block-causal, right-shifted logits)",
    .model_types = {"Fast_dLLM_Qwen"},
    .architectures = {"Fast_dLLM_QwenForCausalLM"},
    .unsupported = "",
    .parse_config = parse_fast_dllm_v2,
    .global_tensor = qwen_global_tensor,
    .layer_tensor = qwen_layer_tensor,
};

}  // namespace dllm
