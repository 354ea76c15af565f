// ModelConfig: one normalised description of a checkpoint, whatever family wrote it. Families
// (families/*.cpp) translate their config.json dialect into it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention_rule.h"

namespace dllm {

// RoPE scaling as config.json's rope_scaling / rope_parameters asks (model/rope.h turns it into
// frequencies the way Hugging Face transformers does).
struct RopeScaling {
  std::string type = "default";  // default | linear | dynamic (NTK-aware) | yarn
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // 0: not given (max_position_embeddings)
  double attention_factor = 0.0;                 // yarn: 0 = derived from factor and mscale
  double beta_fast = 32.0, beta_slow = 1.0;      // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;     // yarn (DeepSeek style); 0 = not given
  bool truncate = true;                          // yarn: round the correction range outward
};

// Mixture-of-experts FFN of BailingMoeV2-style checkpoints (LLaDA2.x, model-specs §6.3): a
// sigmoid router whose per-expert bias steers only the selection, group-limited top-k, routed
// experts weighted by their normalised un-biased scores x routed_scaling_factor, plus shared
// experts on every token. num_experts == 0: a dense model.
struct MoeConfig {
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;         // num_experts_per_tok (top-k)
  int64_t num_shared_experts = 0;        // their FFNs are one of width shared x expert_intermediate
  int64_t expert_intermediate_size = 0;  // moe_intermediate_size
  int64_t first_dense_layers = 0;        // first_k_dense_replace: layers below are dense
  int64_t num_groups = 1;                // n_group: experts split into this many groups
  int64_t groups_per_token = 1;          // topk_group: groups a token may route into
  double routed_scaling_factor = 1.0;
  bool expert_bias = false;  // moe_router_enable_expert_bias: mlp.gate.expert_bias exists
  // The routed experts this model holds: all of them, or an expert-parallel rank's share
  // (first_held_expert .. + held_experts; tensor_parallel_plan.h). The router still scores all.
  int64_t first_held_expert = 0;
  int64_t held_experts = 0;  // 0: all
  // The shared experts' features held: all, or a tensor-parallel rank's share (split by feature
  // whether the routed experts split by feature or by expert). 0: all.
  int64_t held_shared_features = 0;

  bool is_moe_layer(int64_t layer) const { return num_experts > 0 && layer >= first_dense_layers; }
  int64_t held_count() const { return held_experts > 0 ? held_experts : num_experts; }
  int64_t experts_per_group() const { return num_experts / num_groups; }
  int64_t shared_intermediate_size() const {
    return held_shared_features > 0 ? held_shared_features
                                    : num_shared_experts * expert_intermediate_size;
  }
};

struct ModelConfig {
  std::string family;        // "sdar", "wedlm", "fast_dllm_v2", "dream", "llada", "llada2_moe"
  std::string model_type;    // config.json model_type as written
  std::string architecture;  // config.json architectures[0]
  std::string torch_dtype;   // as declared ("bfloat16"), informational

  int64_t vocab_size = 0;  // rows of the embedding == columns of the logits
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // Context length in positions. config.json's max_position_embeddings (max_sequence_length for
  // LLaDA); when the checkpoint gives none, kDefaultContextCap (32768) and the flag below is set.
  int64_t max_position_embeddings = 0;
  bool context_limit_is_default = false;

  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double partial_rotary_factor = 1.0;
  int64_t rotary_dim = 0;  // head_dim * partial_rotary_factor, even
  double norm_eps = 1e-6;

  bool qk_norm = false;          // per-head RMSNorm on q and k before RoPE (Qwen3 style)
  bool qkv_bias = false;         // q/k/v projections carry biases (Qwen2 style)
  bool tied_embeddings = false;  // lm_head shares the embedding matrix
  bool fused_qkv = false;        // one query_key_value tensor, rows [Q | K | V] (LLaDA2.x)
  MoeConfig moe;                 // num_experts == 0: every layer's FFN is dense

  int64_t mask_token_id = -1;  // -1: unknown
  int64_t eos_token_id = -1;
  int64_t pad_token_id = -1;
  int64_t bos_token_id = -1;
  int64_t eot_token_id = -1;  // end of turn (LLaDA's <|eot_id|>, for confidence_eos_eot_inf)
  std::vector<int64_t> stop_token_ids;  // eos plus generation_config.json eos_token_id list

  AttentionKind attention = AttentionKind::kCausal;  // how the family decodes
  int64_t block_size = 0;       // trained block length of block-causal families, 0 otherwise
  bool shifted_logits = false;  // token i is predicted by the logit at i-1 (Fast-dLLM v2, Dream)

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  // Elements of all weights the forward uses (embedding, lm head unless tied, every layer), for
  // memory checks before allocating (random-weight models, benchmarks). validate() has checked
  // it fits in int64 and below kMaxWeightElements.
  int64_t weight_elements() const;
  // "32768 positions" or "32768 positions (default cap: config.json gives no
  // max_position_embeddings)", for messages about the context length.
  std::string context_limit_description() const;
  // Checks the numbers are usable (positive, divisible, in range, products without overflow);
  // errors name `source`, the field, its value and the accepted range.
  void validate(const std::string& source) const;

  // Upper bound on weight_elements(): 2^40 (2 TiB of bf16) is beyond any published checkpoint.
  static constexpr int64_t kMaxWeightElements = int64_t{1} << 40;
};

}  // namespace dllm
