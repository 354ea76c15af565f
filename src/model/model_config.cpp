#include "model/model_config.h"

#include <cmath>
#include <optional>

#include "core/error.h"

namespace dllm {

namespace {

// a * b + c on int64 with overflow reported as nullopt.
std::optional<int64_t> mul_add(int64_t a, int64_t b, int64_t c = 0) {
  int64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum))
    return std::nullopt;
  return sum;
}

// Elements of one transformer layer, or nullopt on overflow.
std::optional<int64_t> layer_elements(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  auto attention = mul_add(c.q_dim() + 2 * c.kv_dim(), h);                  // q, k, v
  auto output = mul_add(h, c.q_dim());                                      // o
  auto mlp = mul_add(3 * c.intermediate_size, h);                           // gate, up, down
  auto small = mul_add(2, h, 2 * c.head_dim + c.q_dim() + 2 * c.kv_dim());  // norms, biases
  if (!attention || !output || !mlp || !small) return std::nullopt;
  int64_t total = 0;
  for (int64_t part : {*attention, *output, *mlp, *small})
    if (__builtin_add_overflow(total, part, &total)) return std::nullopt;
  return total;
}

std::optional<int64_t> checked_weight_elements(const ModelConfig& c) {
  const auto layer = layer_elements(c);
  const auto embed = mul_add(c.vocab_size, c.hidden_size);
  if (!layer || !embed) return std::nullopt;
  auto total = mul_add(*layer, c.num_layers, c.hidden_size);  // + final norm
  if (!total) return std::nullopt;
  const auto with_embeddings = mul_add(*embed, c.tied_embeddings ? 1 : 2, *total);
  return with_embeddings;
}

}  // namespace

int64_t ModelConfig::weight_elements() const {
  const auto n = checked_weight_elements(*this);
  if (!n) fail("model config: weight element count overflows int64");
  return *n;
}

std::string ModelConfig::context_limit_description() const {
  if (!context_limit_is_default) return cat(max_position_embeddings, " positions");
  return cat(max_position_embeddings,
             " positions (default cap: config.json gives no max_position_embeddings / "
             "max_sequence_length)");
}

void ModelConfig::validate(const std::string& source) const {
  // The family readers range-check the keys they read; these checks also cover derived values
  // (head_dim = hidden / heads, LLaDA's intermediate size from mlp_ratio) and in-memory configs.
  auto in_range = [&](int64_t v, const char* field, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      fail(source, ": ", field, " is ", v, ", outside the accepted range ", lo, "..", hi);
  };
  in_range(vocab_size, "vocab_size", 1, INT32_MAX);
  in_range(hidden_size, "hidden_size", 1, 65536);
  in_range(intermediate_size, "intermediate_size", 1, 1 << 20);
  in_range(num_layers, "num_hidden_layers", 1, 1024);
  in_range(num_heads, "num_attention_heads", 1, 1024);
  in_range(num_kv_heads, "num_key_value_heads", 1, num_heads);
  in_range(head_dim, "head_dim", 1, 1024);
  in_range(max_position_embeddings, "max_position_embeddings", 1, 1 << 24);
  if (num_heads % num_kv_heads != 0)
    fail(source, ": num_attention_heads (", num_heads,
         ") is not a multiple of num_key_value_heads (", num_kv_heads, ")");
  if (rotary_dim <= 0 || rotary_dim > head_dim || rotary_dim % 2 != 0)
    fail(source, ": rotary dimension ", rotary_dim, " (head_dim ", head_dim,
         " x partial_rotary_factor ", partial_rotary_factor, ") must be even and within head_dim");
  if (!(rope_theta > 0) || !std::isfinite(rope_theta))
    fail(source, ": rope_theta is ", rope_theta, "; it must be finite and positive");
  if (!(norm_eps > 0) || !(norm_eps < 1))
    fail(source, ": rms_norm_eps is ", norm_eps, ", outside the accepted range (0, 1)");
  for (auto [id, field] :
       {std::pair{mask_token_id, "mask_token_id"}, std::pair{eos_token_id, "eos_token_id"},
        std::pair{pad_token_id, "pad_token_id"}, std::pair{bos_token_id, "bos_token_id"},
        std::pair{eot_token_id, "eot_token_id"}}) {
    if (id < -1 || id >= vocab_size)
      fail(source, ": ", field, " ", id, " is outside the vocabulary (size ", vocab_size, ")");
  }
  if (attention == AttentionKind::kBlockCausal && block_size <= 0)
    fail(source, ": block-causal family needs a positive block size");
  in_range(block_size, "block size", 0, 65536);
  const auto elements = checked_weight_elements(*this);
  if (!elements || *elements > kMaxWeightElements)
    fail(source, ": the weights these sizes describe (vocab_size ", vocab_size, ", hidden_size ",
         hidden_size, ", intermediate_size ", intermediate_size, ", ", num_layers,
         " layers) exceed ", kMaxWeightElements, " elements, the accepted maximum");
}

}  // namespace dllm
