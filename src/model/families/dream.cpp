// Dream-v0 (HKUNLP): Qwen2.5 layers (qkv bias), fully bidirectional, right-shifted logits,
// mask 151666. model-specs §5.
#include "model/families/config_reader.h"

namespace dllm {
namespace {

ModelConfig parse_dream(const nlohmann::json& j, const std::string& source) {
  ConfigReader r(j, source);
  ModelConfig c;
  read_qwen_style_config(r, c);
  c.family = "dream";
  c.qkv_bias = true;  // DreamAttention builds q/k/v with bias=True
  c.qk_norm = false;
  c.attention = AttentionKind::kBidirectional;
  c.block_size = 0;
  c.shifted_logits = true;
  c.mask_token_id = r.get_token_id("mask_token_id", 151666);
  return c;
}

}  // namespace

const Family kDreamFamily{
    .name = "dream",
    .description = "Dream full diffusion (Qwen2.5 layers, bidirectional, right-shifted logits)",
    .model_types = {"Dream"},
    .architectures = {"DreamModel"},
    .unsupported = "",
    .parse_config = parse_dream,
    .global_tensor = qwen_global_tensor,
    .layer_tensor = qwen_layer_tensor,
};

}  // namespace dllm
