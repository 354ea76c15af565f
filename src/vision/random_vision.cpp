#include "vision/random_vision.h"

#include <cmath>

#include "model/families/family.h"
#include "model/random_model.h"

namespace dllm {

namespace {

constexpr const char* kSource = "<random model config>";

bool has_vision_side(const nlohmann::json& config) {
  return config.value("model_type", std::string()) == "sdar_v";
}

// Scales like a trained tower: projections ~ 1/sqrt(fan_in), norms ~ 1, biases small (the same
// rule make_random_model applies to the language model).
void add_vision_tensors(const VisionConfig& vc, const AddRandomTensor& add) {
  const int64_t d = vc.hidden_size, ff = vc.intermediate_size, th = vc.text_hidden_size;
  auto inv = [](int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); };
  const std::string e = "vision_tower.vision_model.embeddings.";
  const int64_t p = vc.patch_size;
  add(e + "patch_embedding.weight", {d, vc.num_channels, p, p}, 0.0f,
      inv(vc.num_channels * p * p));
  add(e + "patch_embedding.bias", {d}, 0.0f, 0.1f);
  add(e + "position_embedding.weight", {vc.patches_per_crop(), d}, 0.0f, 1.0f);
  for (int64_t i = 0; i < vc.layers_to_run(); ++i) {
    const std::string l = "vision_tower.vision_model.encoder.layers." + std::to_string(i) + ".";
    for (const char* norm : {"layer_norm1.", "layer_norm2."}) {
      add(l + norm + "weight", {d}, 1.0f, 0.1f);
      add(l + norm + "bias", {d}, 0.0f, 0.1f);
    }
    for (const char* proj : {"q_proj.", "k_proj.", "v_proj.", "out_proj."}) {
      add(l + "self_attn." + proj + "weight", {d, d}, 0.0f, inv(d));
      add(l + "self_attn." + proj + "bias", {d}, 0.0f, 0.1f);
    }
    add(l + "mlp.fc1.weight", {ff, d}, 0.0f, inv(d));
    add(l + "mlp.fc1.bias", {ff}, 0.0f, 0.1f);
    add(l + "mlp.fc2.weight", {d, ff}, 0.0f, inv(ff));
    add(l + "mlp.fc2.bias", {d}, 0.0f, 0.1f);
  }
  add("multi_modal_projector.linear_1.weight", {th, d}, 0.0f, inv(d));
  add("multi_modal_projector.linear_2.weight", {th, th}, 0.0f, inv(th));
  if (vc.projector_bias) {
    add("multi_modal_projector.linear_1.bias", {th}, 0.0f, 0.1f);
    add("multi_modal_projector.linear_2.bias", {th}, 0.0f, 0.1f);
  }
  add("image_newline", {th}, 0.0f, 1.0f);
}

}  // namespace

RandomVisionLanguageModel make_random_vision_language_model(const nlohmann::json& config,
                                                            uint64_t seed) {
  RandomVisionLanguageModel out;
  if (!has_vision_side(config)) {
    out.model = make_random_model(config, seed);
    return out;
  }
  const ModelConfig text = find_family(config, kSource).parse_config(config, kSource);
  const VisionConfig vc = read_vision_config(config, text, kSource);
  out.model = make_random_model(config, seed,
                                [&](const AddRandomTensor& add) { add_vision_tensors(vc, add); });
  out.vision = VisionModel::from_parts(*out.model, config, kSource);
  return out;
}

}  // namespace dllm
