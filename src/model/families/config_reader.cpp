#include "model/families/config_reader.h"

#include <cmath>

#include "core/error.h"

namespace dllm {

int64_t ConfigReader::get_int(const std::string& key) const {
  if (!has(key)) fail(source_, ": missing field '", key, "'");
  const auto& v = j_[key];
  if (!v.is_number_integer())
    fail(source_, ": field '", key, "' must be an integer (got ", v.dump(), ")");
  return v.get<int64_t>();
}

int64_t ConfigReader::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double ConfigReader::get_double(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const auto& v = j_[key];
  if (!v.is_number()) fail(source_, ": field '", key, "' must be a number (got ", v.dump(), ")");
  return v.get<double>();
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
  if (v.is_array()) {
    if (v.empty()) return fallback;
    if (!v[0].is_number_integer()) fail(source_, ": field '", key, "' must hold integer token ids");
    return v[0].get<int64_t>();
  }
  if (!v.is_number_integer())
    fail(source_, ": field '", key, "' must be a token id (got ", v.dump(), ")");
  return v.get<int64_t>();
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

void read_qwen_style_config(const ConfigReader& r, ModelConfig& c) {
  read_common_fields(r, c);
  c.vocab_size = r.get_int("vocab_size");
  c.hidden_size = r.get_int("hidden_size");
  c.intermediate_size = r.get_int("intermediate_size");
  c.num_layers = r.get_int("num_hidden_layers");
  c.num_heads = r.get_int("num_attention_heads");
  c.num_kv_heads = r.get_int("num_key_value_heads", c.num_heads);
  if (c.num_heads <= 0) fail(r.source(), ": num_attention_heads must be positive");
  c.head_dim = r.get_int("head_dim", c.hidden_size / c.num_heads);
  c.max_position_embeddings = r.get_int("max_position_embeddings", 0);
  c.norm_eps = r.get_double("rms_norm_eps", 1e-6);
  c.tied_embeddings = r.get_bool("tie_word_embeddings", false);

  // RoPE: transformers >= 5 writes rope_parameters {rope_type, rope_theta, ...}; older configs
  // write rope_theta + rope_scaling. Only plain (unscaled) RoPE is supported.
  c.rope_theta = r.get_double("rope_theta", 10000.0);
  c.partial_rotary_factor = r.get_double("partial_rotary_factor", 1.0);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!r.has(key)) continue;
    const auto& rp = r.json()[key];
    if (!rp.is_object()) fail(r.source(), ": field '", key, "' must be an object or null");
    const std::string type = rp.value("rope_type", rp.value("type", std::string("default")));
    if (type != "default") r.unsupported(key, "RoPE scaling type '" + type + "'");
    if (rp.contains("rope_theta") && rp["rope_theta"].is_number())
      c.rope_theta = rp["rope_theta"].get<double>();
    if (rp.contains("partial_rotary_factor") && rp["partial_rotary_factor"].is_number())
      c.partial_rotary_factor = rp["partial_rotary_factor"].get<double>();
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
  }
  return "";
}

}  // namespace dllm
