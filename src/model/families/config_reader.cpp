#include "model/families/config_reader.h"

#include <cmath>
#include <map>

#include "core/error.h"

namespace dllm {

std::optional<IntRange> config_key_range(const std::string& key) {
  // Wide enough for every published checkpoint (and 10x more), narrow enough that products of
  // two sizes stay far from int64 overflow and a typo cannot ask for petabytes.
  static const std::map<std::string, IntRange, std::less<>> ranges = {
      {"vocab_size", {1, INT32_MAX}},  // token ids are int32
      {"embedding_size", {1, INT32_MAX}},
      {"hidden_size", {1, 65536}},
      {"d_model", {1, 65536}},
      {"intermediate_size", {1, 1 << 20}},
      {"mlp_hidden_size", {1, 1 << 20}},
      {"num_hidden_layers", {1, 1024}},
      {"n_layers", {1, 1024}},
      {"num_attention_heads", {1, 1024}},
      {"n_heads", {1, 1024}},
      {"num_key_value_heads", {1, 1024}},
      {"n_kv_heads", {1, 1024}},
      {"head_dim", {1, 1024}},
      {"max_position_embeddings", {1, 1 << 24}},
      {"max_sequence_length", {1, 1 << 24}},
      {"block_size", {1, 65536}},
      {"bd_size", {1, 65536}},
      {"original_max_position_embeddings", {1, 1 << 24}},
      // Mixture of experts (LLaDA2.x / BailingMoeV2); how they fit together: ModelConfig.
      {"num_experts", {1, 65536}},
      {"num_experts_per_tok", {1, 65536}},
      {"num_shared_experts", {0, 64}},
      {"moe_intermediate_size", {1, 1 << 20}},
      {"first_k_dense_replace", {0, 1024}},
      {"n_group", {1, 65536}},
      {"topk_group", {1, 65536}},
  };
  const auto it = ranges.find(key);
  if (it == ranges.end()) return std::nullopt;
  return it->second;
}

std::optional<RealRange> config_key_real_range(const std::string& key) {
  static const std::map<std::string, RealRange, std::less<>> ranges = {
      {"rope_theta", {0.0, 1e12, false}},
      {"partial_rotary_factor", {0.0, 1.0, false}},
      {"rms_norm_eps", {0.0, 1.0, false}},
      {"mlp_ratio", {0.0, 1024.0, false}},
      {"factor", {1.0, 1e6, true}},  // RoPE scaling (model/rope.h)
      {"attention_factor", {0.0, 100.0, false}},
      {"beta_fast", {0.0, 1e6, false}},
      {"beta_slow", {0.0, 1e6, false}},
      {"mscale", {0.0, 1e3, true}},
      {"mscale_all_dim", {0.0, 1e3, true}},
      {"routed_scaling_factor", {0.0, 1e6, false}},
  };
  const auto it = ranges.find(key);
  if (it == ranges.end()) return std::nullopt;
  return it->second;
}

int64_t ConfigReader::get_int(const std::string& key) const {
  if (!has(key)) fail(source_, ": missing field '", key, "'");
  const auto& v = j_[key];
  const std::optional<IntRange> range = config_key_range(key);
  auto out_of_range = [&] {
    fail(source_, ": field '", key, "' is ", v.dump(), ", outside the accepted range ",
         range ? range->min : INT64_MIN, "..", range ? range->max : INT64_MAX);
  };
  // An unsigned value above INT64_MAX would wrap to a negative number in get<int64_t>().
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    out_of_range();
  if (!v.is_number_integer())
    fail(source_, ": field '", key, "' must be an integer (got ", v.dump(), ")");
  const int64_t value = v.get<int64_t>();
  if (range && (value < range->min || value > range->max)) out_of_range();
  return value;
}

int64_t ConfigReader::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double ConfigReader::get_double(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const auto& v = j_[key];
  if (!v.is_number()) fail(source_, ": field '", key, "' must be a number (got ", v.dump(), ")");
  const double value = v.get<double>();
  if (const auto range = config_key_real_range(key)) {
    const bool low_ok = range->min_inclusive ? value >= range->min : value > range->min;
    if (!std::isfinite(value) || !low_ok || value > range->max)
      fail(source_, ": field '", key, "' is ", v.dump(), ", outside the accepted range ",
           range->min_inclusive ? "[" : "(", range->min, ", ", range->max, "]");
  }
  return value;
}

bool ConfigReader::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& v = j_[key];
  if (!v.is_boolean())
    fail(source_, ": field '", key, "' must be true or false (got ", v.dump(), ")");
  return v.get<bool>();
}

std::string ConfigReader::get_string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const auto& v = j_[key];
  if (!v.is_string()) fail(source_, ": field '", key, "' must be a string (got ", v.dump(), ")");
  return v.get<std::string>();
}

int64_t ConfigReader::get_token_id(const std::string& key, int64_t fallback) const {
  if (!has(key)) return fallback;
  const auto& v = j_[key];
  // Range against the vocabulary is checked by ModelConfig::validate; here only that it is an
  // integer that fits (no silent wrap of huge unsigned values).
  auto as_id = [&](const nlohmann::json& id) {
    if (!id.is_number_integer() ||
        (id.is_number_unsigned() && id.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)))
      fail(source_, ": field '", key, "' must hold integer token ids in 0..", INT32_MAX, " (got ",
           id.dump(), ")");
    return id.get<int64_t>();
  };
  if (v.is_array()) {
    if (v.empty()) return fallback;
    return as_id(v[0]);
  }
  return as_id(v);
}

void ConfigReader::unsupported(const std::string& key, const std::string& why) const {
  fail(source_, ": field '", key, "': ", why, " is not supported");
}

void read_common_fields(const ConfigReader& r, ModelConfig& c) {
  c.model_type = r.get_string("model_type", "");
  if (r.has("architectures")) {
    const auto& a = r.json()["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string())
      fail(r.source(), ": field 'architectures' must be a non-empty list of strings");
    c.architecture = a[0].get<std::string>();
  }
  c.torch_dtype = r.get_string("torch_dtype", r.get_string("dtype", ""));
}

void read_context_limit(const ConfigReader& r, const std::string& key, ModelConfig& c) {
  c.context_limit_is_default = !r.has(key);
  c.max_position_embeddings = r.has(key) ? r.get_int(key) : kDefaultContextCap;
}

// rope_scaling / rope_parameters' scaling fields (model/rope.h says what they mean).
static void read_rope_scaling(const ConfigReader& r, const char* key, const ConfigReader& nested,
                              ModelConfig& c) {
  RopeScaling& s = c.rope_scaling;
  s.type = nested.get_string("rope_type", nested.get_string("type", "default"));
  if (s.type != "default" && s.type != "linear" && s.type != "dynamic" && s.type != "yarn")
    r.unsupported(key,
                  "RoPE scaling type '" + s.type + "' (supported: default, linear, dynamic, yarn)");
  if (s.type == "default") return;
  if (nested.has("original_max_position_embeddings"))
    s.original_max_position_embeddings = nested.get_int("original_max_position_embeddings");
  if (nested.has("factor")) {
    s.factor = nested.get_double("factor", 1.0);
  } else if (s.type == "yarn" && s.original_max_position_embeddings > 0) {
    // transformers 5: the factor defaults to the ratio of the context lengths.
    s.factor = static_cast<double>(c.max_position_embeddings) /
               static_cast<double>(s.original_max_position_embeddings);
  } else {
    fail(nested.source(), ": missing field 'factor' (RoPE scaling '", s.type, "')");
  }
  if (s.type != "yarn") return;
  s.attention_factor = nested.get_double("attention_factor", 0.0);
  s.beta_fast = nested.get_double("beta_fast", 32.0);
  s.beta_slow = nested.get_double("beta_slow", 1.0);
  s.mscale = nested.get_double("mscale", 0.0);
  s.mscale_all_dim = nested.get_double("mscale_all_dim", 0.0);
  s.truncate = nested.get_bool("truncate", true);
}

void read_qwen_style_config(const ConfigReader& r, ModelConfig& c) {
  read_common_fields(r, c);
  c.vocab_size = r.get_int("vocab_size");
  c.hidden_size = r.get_int("hidden_size");
  c.intermediate_size = r.get_int("intermediate_size");
  c.num_layers = r.get_int("num_hidden_layers");
  c.num_heads = r.get_int("num_attention_heads");
  c.num_kv_heads = r.get_int("num_key_value_heads", c.num_heads);
  c.head_dim = r.get_int("head_dim", c.hidden_size / c.num_heads);
  read_context_limit(r, "max_position_embeddings", c);
  c.norm_eps = r.get_double("rms_norm_eps", 1e-6);
  c.tied_embeddings = r.get_bool("tie_word_embeddings", false);

  // RoPE: transformers >= 5 writes rope_parameters {rope_type, rope_theta, ...}; older configs
  // write rope_theta + rope_scaling. Scaling: default, linear, dynamic (NTK-aware), yarn
  // (model/rope.h).
  c.rope_theta = r.get_double("rope_theta", 10000.0);
  c.partial_rotary_factor = r.get_double("partial_rotary_factor", 1.0);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!r.has(key)) continue;
    const auto& rp = r.json()[key];
    if (!rp.is_object()) fail(r.source(), ": field '", key, "' must be an object or null");
    const ConfigReader nested(rp, cat(r.source(), " (", key, ")"));
    read_rope_scaling(r, key, nested, c);
    c.rope_theta = nested.get_double("rope_theta", c.rope_theta);
    c.partial_rotary_factor = nested.get_double("partial_rotary_factor", c.partial_rotary_factor);
  }
  c.rotary_dim = static_cast<int64_t>(std::llround(c.head_dim * c.partial_rotary_factor));

  const std::string act = r.get_string("hidden_act", "silu");
  if (act != "silu") r.unsupported("hidden_act", "activation '" + act + "'");
  if (r.get_bool("use_sliding_window", false))
    r.unsupported("use_sliding_window", "sliding-window attention");

  c.bos_token_id = r.get_token_id("bos_token_id", -1);
  c.eos_token_id = r.get_token_id("eos_token_id", -1);
  c.pad_token_id = r.get_token_id("pad_token_id", -1);
}

std::string qwen_global_tensor(GlobalTensor t) {
  switch (t) {
    case GlobalTensor::kEmbed:
      return "model.embed_tokens.weight";
    case GlobalTensor::kFinalNorm:
      return "model.norm.weight";
    case GlobalTensor::kLmHead:
      return "lm_head.weight";
  }
  return "";
}

std::string qwen_layer_tensor(int64_t layer, LayerTensor t) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  switch (t) {
    case LayerTensor::kAttnNorm:
      return p + "input_layernorm.weight";
    case LayerTensor::kQ:
      return p + "self_attn.q_proj.weight";
    case LayerTensor::kK:
      return p + "self_attn.k_proj.weight";
    case LayerTensor::kV:
      return p + "self_attn.v_proj.weight";
    case LayerTensor::kO:
      return p + "self_attn.o_proj.weight";
    case LayerTensor::kQBias:
      return p + "self_attn.q_proj.bias";
    case LayerTensor::kKBias:
      return p + "self_attn.k_proj.bias";
    case LayerTensor::kVBias:
      return p + "self_attn.v_proj.bias";
    case LayerTensor::kQNorm:
      return p + "self_attn.q_norm.weight";
    case LayerTensor::kKNorm:
      return p + "self_attn.k_norm.weight";
    case LayerTensor::kMlpNorm:
      return p + "post_attention_layernorm.weight";
    case LayerTensor::kGate:
      return p + "mlp.gate_proj.weight";
    case LayerTensor::kUp:
      return p + "mlp.up_proj.weight";
    case LayerTensor::kDown:
      return p + "mlp.down_proj.weight";
    default:
      return "";  // Qwen layers have no fused or mixture-of-experts tensors
  }
}

}  // namespace dllm
