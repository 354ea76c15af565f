// Model: a checkpoint directory opened and validated — config normalised, every weight the forward
// needs located and shape-checked. Weights stay memory-mapped; each backend converts/uploads them
// in the layout it computes with.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "io/safetensors.h"
#include "model/families/family.h"
#include "model/model_config.h"

namespace dllm {

struct TensorParallelPlan;  // model/tensor_parallel_plan.h

// One SwiGLU FFN: down(silu(gate(x)) * up(x)).
struct FfnTensors {
  const TensorEntry* gate = nullptr;
  const TensorEntry* up = nullptr;
  const TensorEntry* down = nullptr;
};

struct LayerTensors {
  const TensorEntry* attn_norm = nullptr;
  const TensorEntry* qkv = nullptr;  // fused_qkv only (then q, k, v are null)
  const TensorEntry* q = nullptr;
  const TensorEntry* k = nullptr;
  const TensorEntry* v = nullptr;
  const TensorEntry* o = nullptr;
  const TensorEntry* q_bias = nullptr;  // qkv_bias only
  const TensorEntry* k_bias = nullptr;
  const TensorEntry* v_bias = nullptr;
  const TensorEntry* q_norm = nullptr;  // qk_norm only
  const TensorEntry* k_norm = nullptr;
  const TensorEntry* mlp_norm = nullptr;
  const TensorEntry* gate = nullptr;
  const TensorEntry* up = nullptr;
  const TensorEntry* down = nullptr;
  // MoE layers (then gate, up, down are null): router, its selection bias, the routed experts
  // and the shared experts (all of them one FFN; null without shared experts).
  const TensorEntry* router = nullptr;
  const TensorEntry* expert_bias = nullptr;
  std::vector<FfnTensors> experts;
  FfnTensors shared;
};

struct ModelTensors {
  const TensorEntry* embed = nullptr;
  const TensorEntry* final_norm = nullptr;
  const TensorEntry* lm_head = nullptr;  // == embed when embeddings are tied
  std::vector<LayerTensors> layers;
};

class Model {
 public:
  // Opens `dir` (config.json, optional generation_config.json, safetensors). Errors name the file
  // and the field or tensor at fault.
  static std::unique_ptr<Model> load(const std::filesystem::path& dir);
  // Builds a model from an in-memory config and an already-open tensor store (tests, benchmarks).
  static std::unique_ptr<Model> from_parts(const nlohmann::json& config, TensorStore store,
                                           std::string source);
  // One rank's model of a tensor-parallel group (model_shard.cpp): its heads, KV heads and FFN
  // features (MoE: its features of every expert, or its experts), its weight slices (a fused
  // QKV: its Q, K and V rows; the LM head: its vocabulary rows, untied); embedding, norms and
  // router replicated. Slices of whole rows are views of `whole`'s tensors (no copy: a 100B
  // checkpoint is not held twice), so `whole` must outlive the rank's model; column slices (o,
  // down) are copies.
  static std::unique_ptr<Model> shard(const Model& whole, const TensorParallelPlan& plan);

  const ModelConfig& config() const { return config_; }
  const Family& family() const { return *family_; }
  const ModelTensors& tensors() const { return tensors_; }
  const TensorStore& store() const { return store_; }
  const std::filesystem::path& dir() const { return dir_; }

  // The vocabulary ids whose LM-head rows this model holds, [begin, begin + count): every id,
  // except in a tensor-parallel rank, whose LM head is its slice of the vocabulary (its logits
  // rows are that slice; the token statistics merge across the ranks, vocab_parallel_stats.h).
  int64_t lm_head_vocab_begin() const { return lm_head_begin_; }
  int64_t lm_head_vocab_count() const { return tensors_.lm_head->shape[0]; }
  bool lm_head_is_vocab_slice() const { return lm_head_vocab_count() != config_.vocab_size; }

  int64_t parameter_count() const;  // elements of the tensors the forward uses (tied counted once)
  size_t weight_bytes() const;      // bytes of those tensors as stored
  // What a forward of `rows` query rows reads and multiplies, for benchmark floors. Dense models:
  // every parameter. MoE layers read only the routed experts some row picks: `experts_touched`
  // per MoE layer where it was measured (Backend::profiled_moe_experts_touched), else the
  // expected number under uniform routing, E * (1 - (1 - k/E)^rows) — an overestimate for a
  // decoding step, whose [MASK] rows route alike; each row multiplies by its k experts.
  double parameters_read(int64_t rows, std::optional<double> experts_touched = std::nullopt) const;
  double parameters_per_row() const;
  std::vector<std::string> unused_tensors() const;  // in the checkpoint but not used by the forward

 private:
  Model() = default;
  void resolve_tensors();

  std::filesystem::path dir_;
  ModelConfig config_;
  const Family* family_ = nullptr;
  TensorStore store_;
  ModelTensors tensors_;
  int64_t lm_head_begin_ = 0;
  int64_t lm_head_rows_ = -1;  // -1: the whole vocabulary
};

}  // namespace dllm
