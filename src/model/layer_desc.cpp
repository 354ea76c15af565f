#include "model/layer_desc.h"

namespace dllm {

std::vector<LayerDesc> describe_layers(const ModelConfig& c) {
  LayerDesc d;
  d.attention = {c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim, c.qkv_bias, c.qk_norm};
  d.intermediate_size = c.intermediate_size;
  return std::vector<LayerDesc>(static_cast<size_t>(c.num_layers), d);
}

}  // namespace dllm
