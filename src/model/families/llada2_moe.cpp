// LLaDA2.0 / 2.1 (inclusionAI; BailingMoeV2 / Ling-2.0 mixture of experts): fused query_key_value,
// per-head q/k RMSNorm, partial NeoX RoPE (factor 0.5), the first first_k_dense_replace layers
// dense, the others a sigmoid-routed MoE with group-limited top-k and shared experts;
// block-causal over absolute blocks of 32, position-aligned logits, mask 156895, eos 156892.
// model-specs §6.1-6.4 (config keys and tensor names of the published checkpoints).
#include "model/families/config_reader.h"

namespace dllm {
namespace {

void read_moe(const ConfigReader& r, ModelConfig& c) {
  MoeConfig& m = c.moe;
  m.num_experts = r.has("num_experts") ? r.get_int("num_experts") : 0;
  if (m.num_experts == 0) return;  // LLaDA2MoeDecoderLayer: dense when num_experts is None
  m.experts_per_token = r.get_int("num_experts_per_tok");
  m.num_shared_experts = r.get_int("num_shared_experts", 0);
  m.expert_intermediate_size = r.get_int("moe_intermediate_size");
  m.first_dense_layers = r.get_int("first_k_dense_replace", 0);
  m.num_groups = r.get_int("n_group", 1);
  m.groups_per_token = r.get_int("topk_group", 1);
  m.routed_scaling_factor = r.get_double("routed_scaling_factor", 1.0);
  m.expert_bias = r.get_bool("moe_router_enable_expert_bias", false);
  const std::string score = r.get_string("score_function", "sigmoid");
  if (score != "sigmoid") r.unsupported("score_function", "router score '" + score + "'");
  // norm_topk_prob is not read: the published LLaDA2MoeGate normalises the top-k weights
  // whenever top_k > 1, whatever the flag says (model-specs §6.3).
}

ModelConfig parse_llada2_moe(const nlohmann::json& j, const std::string& source) {
  ConfigReader r(j, source);
  ModelConfig c;
  read_qwen_style_config(r, c);
  c.family = "llada2_moe";
  c.fused_qkv = true;
  c.qk_norm = r.get_bool("use_qk_norm", false);
  if (r.get_bool("use_qkv_bias", false)) r.unsupported("use_qkv_bias", "query_key_value bias");
  if (r.get_bool("use_bias", false)) r.unsupported("use_bias", "attention output bias");
  if (r.get_bool("norm_head", false)) r.unsupported("norm_head", "a normalised LM head");
  read_moe(r, c);
  c.attention = AttentionKind::kBlockCausal;
  c.block_size = r.get_int("block_size", 32);  // generate(block_length=32); not in config.json
  c.shifted_logits = false;
  c.mask_token_id = r.get_token_id("mask_token_id", 156895);
  if (c.eos_token_id < 0) c.eos_token_id = 156892;  // generate(eos_id=156892)
  return c;
}

std::string llada2_global_tensor(GlobalTensor t) {
  switch (t) {
    case GlobalTensor::kEmbed:
      return "model.word_embeddings.weight";
    case GlobalTensor::kFinalNorm:
      return "model.norm.weight";
    case GlobalTensor::kLmHead:
      return "lm_head.weight";
  }
  return "";
}

std::string llada2_layer_tensor(int64_t layer, LayerTensor t) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  switch (t) {
    case LayerTensor::kAttnNorm:
      return p + "input_layernorm.weight";
    case LayerTensor::kQkv:
      return p + "attention.query_key_value.weight";
    case LayerTensor::kQNorm:
      return p + "attention.query_layernorm.weight";
    case LayerTensor::kKNorm:
      return p + "attention.key_layernorm.weight";
    case LayerTensor::kO:
      return p + "attention.dense.weight";
    case LayerTensor::kMlpNorm:
      return p + "post_attention_layernorm.weight";
    case LayerTensor::kGate:  // dense layers (layer < first_k_dense_replace)
      return p + "mlp.gate_proj.weight";
    case LayerTensor::kUp:
      return p + "mlp.up_proj.weight";
    case LayerTensor::kDown:
      return p + "mlp.down_proj.weight";
    case LayerTensor::kRouter:
      return p + "mlp.gate.weight";
    case LayerTensor::kExpertBias:
      return p + "mlp.gate.expert_bias";
    case LayerTensor::kSharedGate:
      return p + "mlp.shared_experts.gate_proj.weight";
    case LayerTensor::kSharedUp:
      return p + "mlp.shared_experts.up_proj.weight";
    case LayerTensor::kSharedDown:
      return p + "mlp.shared_experts.down_proj.weight";
    default:
      return "";  // no separate q/k/v, no biases
  }
}

std::string llada2_expert_tensor(int64_t layer, int64_t expert, LayerTensor t) {
  const std::string p =
      "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + ".";
  switch (t) {
    case LayerTensor::kGate:
      return p + "gate_proj.weight";
    case LayerTensor::kUp:
      return p + "up_proj.weight";
    case LayerTensor::kDown:
      return p + "down_proj.weight";
    default:
      return "";
  }
}

}  // namespace

const Family kLlada2MoeFamily{
    .name = "llada2_moe",
    .description =
        "LLaDA2.x block diffusion (BailingMoeV2 mixture of experts, fused QKV, partial RoPE, "
        "block-causal, position-aligned logits)",
    .model_types = {"llada2_moe"},
    .architectures = {"LLaDA2MoeModelLM"},
    .unsupported = "",
    .parse_config = parse_llada2_moe,
    .global_tensor = llada2_global_tensor,
    .layer_tensor = llada2_layer_tensor,
    .expert_tensor = llada2_expert_tensor,
};

}  // namespace dllm
