#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
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

// Sum of parts with overflow reported as nullopt.
std::optional<int64_t> sum(std::initializer_list<std::optional<int64_t>> parts) {
  int64_t total = 0;
  for (const auto& part : parts)
    if (!part || __builtin_add_overflow(total, *part, &total)) return std::nullopt;
  return total;
}

// Elements of a layer's attention, norms and biases, or nullopt on overflow.
std::optional<int64_t> attention_elements(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  return sum({mul_add(c.q_dim() + 2 * c.kv_dim(), h),                        // q, k, v
              mul_add(h, c.q_dim()),                                         // o
              mul_add(2, h, 2 * c.head_dim + c.q_dim() + 2 * c.kv_dim())});  // norms, biases
}

// Elements of an MoE FFN: router (+ expert bias), routed experts, shared experts.
std::optional<int64_t> moe_elements(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  const auto expert = mul_add(3 * m.expert_intermediate_size, c.hidden_size);
  if (!expert) return std::nullopt;
  return sum({mul_add(m.num_experts, c.hidden_size + 1), mul_add(*expert, m.held_count()),
              mul_add(3 * m.shared_intermediate_size(), c.hidden_size)});
}

std::optional<int64_t> checked_weight_elements(const ModelConfig& c) {
  const auto attention = attention_elements(c);
  const auto dense_layer = sum({attention, mul_add(3 * c.intermediate_size, c.hidden_size)});
  const auto embed = mul_add(c.vocab_size, c.hidden_size);
  if (!dense_layer || !embed) return std::nullopt;
  const int64_t moe_layers =
      c.moe.num_experts > 0 ? std::max<int64_t>(0, c.num_layers - c.moe.first_dense_layers) : 0;
  std::optional<int64_t> moe_part = 0;
  if (moe_layers > 0) {
    const auto moe_layer = sum({attention, moe_elements(c)});
    if (!moe_layer) return std::nullopt;
    moe_part = mul_add(*moe_layer, moe_layers);
  }
  return sum({mul_add(*dense_layer, c.num_layers - moe_layers, c.hidden_size),  // + final norm
              moe_part, mul_add(*embed, c.tied_embeddings ? 1 : 2)});
}

// The MoE sizes fit together (group-limited top-k needs at least two experts per group).
void validate_moe(const ModelConfig& c, const std::string& source) {
  const MoeConfig& m = c.moe;
  if (m.num_experts == 0) return;
  auto in_range = [&](int64_t v, const char* field, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      fail(source, ": ", field, " is ", v, ", outside the accepted range ", lo, "..", hi);
  };
  in_range(m.num_experts, "num_experts", 1, 65536);
  in_range(m.num_groups, "n_group", 1, m.num_experts);
  if (m.num_experts % m.num_groups != 0)
    fail(source, ": num_experts (", m.num_experts, ") is not a multiple of n_group (", m.num_groups,
         ")");
  if (m.experts_per_group() < 2)
    fail(source, ": n_group ", m.num_groups, " leaves ", m.experts_per_group(),
         " expert(s) per group; group scores sum each group's top 2, so at least 2 are needed");
  in_range(m.groups_per_token, "topk_group", 1, m.num_groups);
  in_range(m.experts_per_token, "num_experts_per_tok", 1,
           m.groups_per_token * m.experts_per_group());
  in_range(m.expert_intermediate_size, "moe_intermediate_size", 1, 1 << 20);
  in_range(m.num_shared_experts, "num_shared_experts", 0, 64);
  in_range(m.first_dense_layers, "first_k_dense_replace", 0, c.num_layers);
  if (m.first_held_expert < 0 || m.held_experts < 0 ||
      m.first_held_expert + m.held_count() > m.num_experts)
    fail(source, ": held experts ", m.first_held_expert, " + ", m.held_count(), " exceed the ",
         m.num_experts, " experts (internal error)");
  if (!(m.routed_scaling_factor > 0) || !(m.routed_scaling_factor <= 1e6))
    fail(source, ": routed_scaling_factor is ", m.routed_scaling_factor,
         ", outside the accepted range (0, 1e6]");
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
  validate_moe(*this, source);
  const auto elements = checked_weight_elements(*this);
  if (!elements || *elements > kMaxWeightElements)
    fail(source, ": the weights these sizes describe (vocab_size ", vocab_size, ", hidden_size ",
         hidden_size, ", intermediate_size ", intermediate_size, ", ", num_layers,
         " layers) exceed ", kMaxWeightElements, " elements, the accepted maximum");
}

}  // namespace dllm
