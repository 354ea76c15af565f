// Typed access to config.json fields with errors that name the file and the field. Every size
// key a family reads has an accepted range (config_key_range, listed in docs/hostile-input.md);
// values outside it, integers that do not fit in 64 bits and non-integers are refused with
// "<file>: field '<key>' is <value>, outside the accepted range <min>..<max>", never wrapped.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/families/family.h"

namespace dllm {

// Accepted range of a config.json key (inclusive).
struct IntRange {
  int64_t min, max;
};
struct RealRange {
  double min, max;
  bool min_inclusive;  // false: (min, max]
};
// Known size keys (hidden_size, d_model, n_layers, ...); nullopt for keys without a range.
std::optional<IntRange> config_key_range(const std::string& key);
std::optional<RealRange> config_key_real_range(const std::string& key);

// A model whose config.json gives no context length (max_position_embeddings /
// max_sequence_length) is capped here, so that a request cannot size its KV cache and canvas
// without bound; the cap is printed by `dllm info` and documented in the README.
inline constexpr int64_t kDefaultContextCap = 32768;

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
// The context length from `key`, or kDefaultContextCap (marked as such) when the key is absent.
void read_context_limit(const ConfigReader& r, const std::string& key, ModelConfig& c);
// Qwen2/Qwen3 style config (SDAR, WeDLM, Fast-dLLM v2, Dream): sizes, RoPE, norm, ids.
void read_qwen_style_config(const ConfigReader& r, ModelConfig& c);
// SDAR's config (model-specs §1): Qwen3 style with q/k norm, block-causal attention of
// block_size, unshifted logits, its mask token; also the language model of SDAR-VL.
void read_sdar_config(const ConfigReader& r, ModelConfig& c);
// Hugging Face Qwen tensor names (model.layers.{i}.self_attn.q_proj.weight, ...).
std::string qwen_global_tensor(GlobalTensor t);
std::string qwen_layer_tensor(int64_t layer, LayerTensor t);

}  // namespace dllm
