#include "model/model_config.h"

#include "core/error.h"

namespace dllm {

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* field) {
    if (v <= 0) fail(source, ": ", field, " must be positive (got ", v, ")");
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_hidden_layers");
  positive(num_heads, "num_attention_heads");
  positive(num_kv_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  if (num_heads % num_kv_heads != 0)
    fail(source, ": num_attention_heads (", num_heads,
         ") is not a multiple of num_key_value_heads (", num_kv_heads, ")");
  if (rotary_dim <= 0 || rotary_dim > head_dim || rotary_dim % 2 != 0)
    fail(source, ": rotary dimension ", rotary_dim, " (head_dim ", head_dim,
         " x partial_rotary_factor ", partial_rotary_factor, ") must be even and within head_dim");
  if (!(rope_theta > 0)) fail(source, ": rope_theta must be positive");
  if (!(norm_eps > 0)) fail(source, ": rms_norm_eps must be positive");
  for (auto [id, field] :
       {std::pair{mask_token_id, "mask_token_id"}, std::pair{eos_token_id, "eos_token_id"},
        std::pair{pad_token_id, "pad_token_id"}, std::pair{bos_token_id, "bos_token_id"}}) {
    if (id < -1 || id >= vocab_size)
      fail(source, ": ", field, " ", id, " is outside the vocabulary (size ", vocab_size, ")");
  }
  if (attention == AttentionKind::kBlockCausal && block_size <= 0)
    fail(source, ": block-causal family needs a positive block size");
}

}  // namespace dllm
