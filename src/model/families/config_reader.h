// Typed access to config.json fields with errors that name the file and the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/families/family.h"

namespace dllm {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& config, std::string source)
      : j_(config), source_(std::move(source)) {}

  bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  int64_t get_int(const std::string& key) const;  // required
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // Token ids may be an int, a list of ints (first one wins) or null.
  int64_t get_token_id(const std::string& key, int64_t fallback) const;
  [[noreturn]] void unsupported(const std::string& key, const std::string& why) const;
  const std::string& source() const { return source_; }
  const nlohmann::json& json() const { return j_; }

 private:
  const nlohmann::json& j_;
  std::string source_;
};

// Fills the fields every family reads the same way: model_type, architectures[0], torch_dtype.
void read_common_fields(const ConfigReader& r, ModelConfig& c);
// Qwen2/Qwen3 style config (SDAR, WeDLM, Fast-dLLM v2, Dream): sizes, RoPE, norm, ids.
void read_qwen_style_config(const ConfigReader& r, ModelConfig& c);
// Hugging Face Qwen tensor names (model.layers.{i}.self_attn.q_proj.weight, ...).
std::string qwen_global_tensor(GlobalTensor t);
std::string qwen_layer_tensor(int64_t layer, LayerTensor t);

}  // namespace dllm
