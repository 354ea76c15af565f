#include "model/layer_desc.h"

namespace dllm {

std::vector<LayerDesc> describe_layers(const ModelConfig& c) {
  std::vector<LayerDesc> layers;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerDesc d;
    d.attention = {c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim,
                   c.qkv_bias,  c.qk_norm,      c.fused_qkv};
    if (c.moe.is_moe_layer(i)) {
      d.ffn = FfnKind::kMoeSwiGlu;
      d.moe = c.moe;
    } else {
      d.intermediate_size = c.intermediate_size;
    }
    layers.push_back(d);
  }
  return layers;
}

}  // namespace dllm
