// dllm info MODEL_DIR: what a checkpoint is (family, shapes, size) before running it.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "model/model.h"
#include "vision/vision_model.h"

namespace dllm::cli {

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string ids_string(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s.empty() ? "-" : s;
}

// The vision side of a vision-language checkpoint (SDAR-VL).
void print_vision(const VisionModel& vm) {
  const VisionConfig& v = vm.config;
  std::printf(
      "vision tower     SigLIP: %lld of %lld layers (feature layer %lld), hidden %lld "
      "(intermediate %lld), %lld heads\n",
      static_cast<long long>(v.layers_to_run()), static_cast<long long>(v.num_layers),
      static_cast<long long>(v.feature_layer), static_cast<long long>(v.hidden_size),
      static_cast<long long>(v.intermediate_size), static_cast<long long>(v.num_heads));
  std::printf(
      "vision input     %lldx%lld crops, patch %lld (%lld features per crop), anyres_max_%lld "
      "over %zu pinpoints; video: %lld features per frame\n",
      static_cast<long long>(v.image_size), static_cast<long long>(v.image_size),
      static_cast<long long>(v.patch_size), static_cast<long long>(v.patches_per_crop()),
      static_cast<long long>(v.max_num_patches), v.grid_pinpoints.size(),
      static_cast<long long>(v.pooled_side() * v.pooled_side()));
  std::printf("projector        %lld -> %lld -> %lld (GELU%s), image_newline\n",
              static_cast<long long>(v.hidden_size), static_cast<long long>(v.text_hidden_size),
              static_cast<long long>(v.text_hidden_size), v.projector_bias ? ", bias" : "");
  std::printf("vision tokens    image %lld, video %lld\n", static_cast<long long>(v.image_token_id),
              static_cast<long long>(v.video_token_id));
  std::printf("vision params    %lld (%.3f B)\n", static_cast<long long>(vm.parameter_count()),
              static_cast<double>(vm.parameter_count()) / 1e9);
}

void run_info(const std::string& dir) {
  auto model = Model::load(dir);
  const ModelConfig& c = model->config();
  std::map<std::string, int64_t> dtypes;
  for (const TensorEntry* t : model->store().all()) dtypes[t->dtype_name] += t->numel();
  std::string dtype_list;
  for (const auto& [name, n] : dtypes) dtype_list += (dtype_list.empty() ? "" : ", ") + name;
  const int64_t params = model->parameter_count();

  std::printf("model            %s\n", dir.c_str());
  std::printf("family           %s — %s\n", c.family.c_str(), model->family().description.c_str());
  std::printf("architecture     %s (model_type %s)\n", c.architecture.c_str(),
              c.model_type.c_str());
  std::printf("layers           %lld\n", static_cast<long long>(c.num_layers));
  std::printf("hidden           %lld (intermediate %lld)\n", static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size));
  std::printf("heads            %lld query, %lld key/value, head_dim %lld\n",
              static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
              static_cast<long long>(c.head_dim));
  std::printf("vocab            %lld\n", static_cast<long long>(c.vocab_size));
  std::printf("context          %s\n", c.context_limit_description().c_str());
  std::printf("rope             theta %g, rotary dims %lld of %lld\n", c.rope_theta,
              static_cast<long long>(c.rotary_dim), static_cast<long long>(c.head_dim));
  std::printf("norm             RMSNorm eps %g%s\n", c.norm_eps,
              c.qk_norm ? ", per-head q/k norm" : "");
  std::printf("qkv bias         %s%s\n", c.qkv_bias ? "yes" : "no",
              c.fused_qkv ? " (fused query_key_value)" : "");
  if (const MoeConfig& m = c.moe; m.num_experts > 0) {
    std::printf(
        "experts          %lld routed (top %lld, intermediate %lld) + %lld shared, layers "
        "%lld..%lld (the first %lld dense)\n",
        static_cast<long long>(m.num_experts), static_cast<long long>(m.experts_per_token),
        static_cast<long long>(m.expert_intermediate_size),
        static_cast<long long>(m.num_shared_experts), static_cast<long long>(m.first_dense_layers),
        static_cast<long long>(c.num_layers - 1), static_cast<long long>(m.first_dense_layers));
    std::printf("router           sigmoid%s, %lld groups (top %lld), scaling %g\n",
                m.expert_bias ? " + selection bias" : "", static_cast<long long>(m.num_groups),
                static_cast<long long>(m.groups_per_token), m.routed_scaling_factor);
  }
  std::printf("tied embeddings  %s\n", c.tied_embeddings ? "yes" : "no");
  std::printf("attention        %s\n",
              c.attention == AttentionKind::kBlockCausal
                  ? ("block-causal, block " + std::to_string(c.block_size)).c_str()
                  : AttentionRule{c.attention, 0, {}}.to_string().c_str());
  std::printf("logits           %s\n",
              c.shifted_logits ? "right-shifted (token i from logit i-1)" : "position-aligned");
  std::printf("mask id          %lld\n", static_cast<long long>(c.mask_token_id));
  std::printf("eos / pad / bos  %lld / %lld / %lld\n", static_cast<long long>(c.eos_token_id),
              static_cast<long long>(c.pad_token_id), static_cast<long long>(c.bos_token_id));
  std::printf("stop ids         %s\n", ids_string(c.stop_token_ids).c_str());
  std::printf("parameters       %lld (%.3f B)\n", static_cast<long long>(params),
              static_cast<double>(params) / 1e9);
  std::printf("dtype            %s\n", dtype_list.c_str());
  std::printf("weights on disk  %s in %zu file(s)\n",
              human_bytes(static_cast<double>(model->weight_bytes())).c_str(),
              model->store().num_files());
  std::printf("cpu memory       %s (fp32 weights)\n",
              human_bytes(static_cast<double>(params) * 4).c_str());
  std::printf("kv per token     %s (fp32, all layers)\n",
              human_bytes(static_cast<double>(2 * c.num_layers * c.kv_dim() * 4)).c_str());
  const auto vision = VisionModel::load(*model);
  if (vision) print_vision(*vision);
  std::vector<std::string> unused;
  for (const std::string& name : model->unused_tensors()) {
    bool used = false;
    if (vision)
      for (const TensorEntry* t : vision->all_tensors()) used = used || t->name == name;
    if (!used) unused.push_back(name);
  }
  if (!unused.empty())
    std::printf("unused tensors   %zu (e.g. %s)\n", unused.size(), unused.front().c_str());
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("info", "Describe a checkpoint: family, shapes, parameters, memory");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("model_dir", *dir, "Checkpoint directory (config.json + safetensors)")
      ->required();
  cmd->callback([dir] { run_info(*dir); });
}

}  // namespace dllm::cli
