// VisionModel: the vision side of a vision-language checkpoint (SDAR-VL, model-specs §7) — its
// config and its tensors (SigLIP tower up to vision_feature_layer, projector, image_newline),
// located and shape-checked in the Model's tensor store. The language model is the Model itself.
#pragma once

#include <memory>
#include <vector>

#include "model/model.h"
#include "vision/vision_config.h"

namespace dllm {

// SigLIP encoder layer (pre-LN): x += out(attn(ln1(x))); x += fc2(gelu_tanh(fc1(ln2(x)))).
struct VisionLayerTensors {
  const TensorEntry *ln1_w = nullptr, *ln1_b = nullptr;
  const TensorEntry *q_w = nullptr, *q_b = nullptr, *k_w = nullptr, *k_b = nullptr;
  const TensorEntry *v_w = nullptr, *v_b = nullptr, *out_w = nullptr, *out_b = nullptr;
  const TensorEntry *ln2_w = nullptr, *ln2_b = nullptr;
  const TensorEntry *fc1_w = nullptr, *fc1_b = nullptr, *fc2_w = nullptr, *fc2_b = nullptr;
};

struct VisionTensors {
  const TensorEntry* patch_w = nullptr;                      // [hidden, 3, patch, patch]
  const TensorEntry* patch_b = nullptr;                      // [hidden]
  const TensorEntry* position = nullptr;                     // [patches_per_crop, hidden]
  std::vector<VisionLayerTensors> layers;                    // the layers_to_run() first layers
  const TensorEntry *proj1_w = nullptr, *proj1_b = nullptr;  // [text_hidden, hidden]
  const TensorEntry *proj2_w = nullptr, *proj2_b = nullptr;  // [text_hidden, text_hidden]
  const TensorEntry* image_newline = nullptr;                // [text_hidden]
};

struct VisionModel {
  VisionConfig config;
  VisionTensors tensors;

  // The vision side of `model` when its family has one (sdar_v), else null. Reads
  // config.json and preprocessor_config.json from the model's directory; errors name the file
  // and the field or tensor at fault.
  static std::unique_ptr<VisionModel> load(const Model& model);
  // From an in-memory config.json (tests), tensors from `model`'s store.
  static std::unique_ptr<VisionModel> from_parts(const Model& model, const nlohmann::json& config,
                                                 const std::string& source);

  std::vector<const TensorEntry*> all_tensors() const;  // every tensor the vision path uses
  int64_t parameter_count() const;
};

}  // namespace dllm
