#include "vision/vision_model.h"

#include "core/error.h"
#include "io/json_file.h"

namespace dllm {
namespace {

const TensorEntry* want(const TensorStore& store, const std::string& name,
                        const std::vector<int64_t>& shape) {
  return store.get_weight(name, shape);
}

VisionLayerTensors resolve_layer(const TensorStore& s, const VisionConfig& vc, int64_t i) {
  const int64_t d = vc.hidden_size, ff = vc.intermediate_size;
  const std::string l = "vision_tower.vision_model.encoder.layers." + std::to_string(i) + ".";
  VisionLayerTensors t;
  t.ln1_w = want(s, l + "layer_norm1.weight", {d});
  t.ln1_b = want(s, l + "layer_norm1.bias", {d});
  t.q_w = want(s, l + "self_attn.q_proj.weight", {d, d});
  t.q_b = want(s, l + "self_attn.q_proj.bias", {d});
  t.k_w = want(s, l + "self_attn.k_proj.weight", {d, d});
  t.k_b = want(s, l + "self_attn.k_proj.bias", {d});
  t.v_w = want(s, l + "self_attn.v_proj.weight", {d, d});
  t.v_b = want(s, l + "self_attn.v_proj.bias", {d});
  t.out_w = want(s, l + "self_attn.out_proj.weight", {d, d});
  t.out_b = want(s, l + "self_attn.out_proj.bias", {d});
  t.ln2_w = want(s, l + "layer_norm2.weight", {d});
  t.ln2_b = want(s, l + "layer_norm2.bias", {d});
  t.fc1_w = want(s, l + "mlp.fc1.weight", {ff, d});
  t.fc1_b = want(s, l + "mlp.fc1.bias", {ff});
  t.fc2_w = want(s, l + "mlp.fc2.weight", {d, ff});
  t.fc2_b = want(s, l + "mlp.fc2.bias", {d});
  return t;
}

// post_layernorm is not resolved: vision_feature_layer −1 reads hidden_states[−1], the last
// layer's output before it (transformers' SiglipVisionTransformer applies it to
// last_hidden_state only), so `dllm info` lists it among the unused tensors.
VisionTensors resolve(const TensorStore& s, const VisionConfig& vc) {
  const int64_t d = vc.hidden_size, th = vc.text_hidden_size;
  const std::string p = "vision_tower.vision_model.embeddings.";
  VisionTensors v;
  v.patch_w =
      want(s, p + "patch_embedding.weight", {d, vc.num_channels, vc.patch_size, vc.patch_size});
  v.patch_b = want(s, p + "patch_embedding.bias", {d});
  v.position = want(s, p + "position_embedding.weight", {vc.patches_per_crop(), d});
  for (int64_t i = 0; i < vc.layers_to_run(); ++i) v.layers.push_back(resolve_layer(s, vc, i));
  v.proj1_w = want(s, "multi_modal_projector.linear_1.weight", {th, d});
  v.proj2_w = want(s, "multi_modal_projector.linear_2.weight", {th, th});
  if (vc.projector_bias) {
    v.proj1_b = want(s, "multi_modal_projector.linear_1.bias", {th});
    v.proj2_b = want(s, "multi_modal_projector.linear_2.bias", {th});
  }
  v.image_newline = want(s, "image_newline", {th});
  return v;
}

}  // namespace

std::unique_ptr<VisionModel> VisionModel::load(const Model& model) {
  if (model.config().model_type != "sdar_v") return nullptr;
  const auto config_path = model.dir() / "config.json";
  auto vm = from_parts(model, read_json_file(config_path), config_path.string());
  const auto pre_path = model.dir() / "preprocessor_config.json";
  if (const auto pre = read_json_file_if_exists(pre_path))
    read_preprocessor_config(vm->config, *pre, pre_path.string());
  return vm;
}

std::unique_ptr<VisionModel> VisionModel::from_parts(const Model& model,
                                                     const nlohmann::json& config,
                                                     const std::string& source) {
  auto vm = std::make_unique<VisionModel>();
  vm->config = read_vision_config(config, model.config(), source);
  vm->tensors = resolve(model.store(), vm->config);
  return vm;
}

std::vector<const TensorEntry*> VisionModel::all_tensors() const {
  const VisionTensors& v = tensors;
  std::vector<const TensorEntry*> out = {v.patch_w, v.patch_b, v.position, v.proj1_w,
                                         v.proj1_b, v.proj2_w, v.proj2_b,  v.image_newline};
  for (const auto& l : v.layers)
    out.insert(out.end(), {l.ln1_w, l.ln1_b, l.q_w, l.q_b, l.k_w, l.k_b, l.v_w, l.v_b, l.out_w,
                           l.out_b, l.ln2_w, l.ln2_b, l.fc1_w, l.fc1_b, l.fc2_w, l.fc2_b});
  std::erase(out, nullptr);
  return out;
}

int64_t VisionModel::parameter_count() const {
  int64_t n = 0;
  for (const TensorEntry* t : all_tensors()) n += t->numel();
  return n;
}

}  // namespace dllm
