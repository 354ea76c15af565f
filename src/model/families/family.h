// A model family: how one published checkpoint format spells its config and its tensors.
// Each family lives in its own file in this folder; registry.cpp lists them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace dllm {

enum class GlobalTensor { kEmbed, kFinalNorm, kLmHead };
enum class LayerTensor {
  kAttnNorm,
  kQ,
  kK,
  kV,
  kO,
  kQBias,
  kKBias,
  kVBias,
  kQNorm,
  kKNorm,
  kMlpNorm,
  kGate,
  kUp,
  kDown,
  // Fused projections and mixture-of-experts FFNs (LLaDA2.x).
  kQkv,         // query_key_value: rows [Q | K | V]
  kRouter,      // [num_experts, hidden]
  kExpertBias,  // [num_experts], selection only
  kSharedGate,  // shared experts' SwiGLU
  kSharedUp,
  kSharedDown
};

struct Family {
  std::string name;                        // our name, ModelConfig::family
  std::string description;                 // one line for `dllm info`
  std::vector<std::string> model_types;    // config.json model_type values
  std::vector<std::string> architectures;  // config.json architectures[0] values
  std::string unsupported;  // non-empty: recognised but not supported yet (the reason)
  ModelConfig (*parse_config)(const nlohmann::json& config, const std::string& source) = nullptr;
  std::string (*global_tensor)(GlobalTensor) = nullptr;
  std::string (*layer_tensor)(int64_t layer, LayerTensor) = nullptr;
  // Routed expert `expert`'s kGate / kUp / kDown in an MoE layer; null for dense families.
  std::string (*expert_tensor)(int64_t layer, int64_t expert, LayerTensor) = nullptr;
};

const std::vector<const Family*>& all_families();
// Picks the family from model_type (then architectures); unknown or unsupported -> Error naming
// the config file and the value.
const Family& find_family(const nlohmann::json& config, const std::string& source);

// The per-family definitions (one per file).
extern const Family kSdarFamily;
extern const Family kWedlmFamily;
extern const Family kFastDllmV2Family;
extern const Family kDreamFamily;
extern const Family kLladaFamily;
extern const Family kLlada2MoeFamily;

}  // namespace dllm
