// SDAR (JetAstra): Qwen3 layers (qk-norm, no bias), block-causal attention over absolute-aligned
// blocks, position-aligned logits, mask <|MASK|> 151669. model-specs §1.
#include "model/families/config_reader.h"

namespace dllm {

void read_sdar_config(const ConfigReader& r, ModelConfig& c) {
  read_qwen_style_config(r, c);
  c.family = "sdar";
  c.qk_norm = true;
  c.qkv_bias = r.get_bool("attention_bias", false);
  c.attention = AttentionKind::kBlockCausal;
  c.block_size = r.get_int("block_size", 4);
  c.shifted_logits = false;
  c.mask_token_id = r.get_token_id("mask_token_id", 151669);
}

namespace {

ModelConfig parse_sdar(const nlohmann::json& j, const std::string& source) {
  ConfigReader r(j, source);
  ModelConfig c;
  read_sdar_config(r, c);
  return c;
}

}  // namespace

const Family kSdarFamily{
    .name = "sdar",
    .description = "SDAR block diffusion (Qwen3 layers, block-causal, position-aligned logits)",
    .model_types = {"sdar"},
    .architectures = {"SDARForCausalLM"},
    .unsupported = "",
    .parse_config = parse_sdar,
    .global_tensor = qwen_global_tensor,
    .layer_tensor = qwen_layer_tensor,
};

}  // namespace dllm
