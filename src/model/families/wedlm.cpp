// WeDLM (Tencent): a plain causal Qwen3 (8B: qk-norm, no bias) or Qwen2.5 (7B: qkv bias, no
// qk-norm) decoded by streaming parallel decoding. model-specs §2.
#include "model/families/config_reader.h"

namespace dllm {
namespace {

ModelConfig parse_wedlm(const nlohmann::json& j, const std::string& source) {
  ConfigReader r(j, source);
  ModelConfig c;
  read_qwen_style_config(r, c);
  c.family = "wedlm";
  c.qkv_bias = r.get_bool("attention_bias", false);
  // The HF shim reads `qk_norm`; the official engine infers it as "no qkv bias". Prefer the
  // explicit field and fall back to the engine's rule.
  c.qk_norm = r.get_bool("qk_norm", !c.qkv_bias);
  c.attention = AttentionKind::kCausal;
  c.block_size = 0;
  c.shifted_logits = false;
  c.mask_token_id = r.get_token_id("mask_token_id", 151665);  // engine fallback (model_runner.py)
  return c;
}

}  // namespace

const Family kWedlmFamily{
    .name = "wedlm",
    .description =
        "WeDLM causal diffusion (Qwen3 or Qwen2.5 layers, causal, position-aligned logits)",
    .model_types = {"wedlm"},
    .architectures = {"WeDLMForCausalLM"},
    .unsupported = "",
    .parse_config = parse_wedlm,
    .global_tensor = qwen_global_tensor,
    .layer_tensor = qwen_layer_tensor,
};

}  // namespace dllm
