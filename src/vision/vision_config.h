// VisionConfig: the vision side of a LLaVA-OneVision-style checkpoint (SDAR-VL, model-specs §7):
// the SigLIP tower, the projector, the anyres grid and the placeholder token ids, read from
// config.json's top level and vision_config (key names as the published config writes them).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace dllm {

struct VisionConfig {
  // vision_config (SigLIP, model_type siglip_vision_model)
  int64_t image_size = 384;  // side of one crop in pixels
  int64_t patch_size = 14;   // patch_embedding kernel and stride
  int64_t num_channels = 3;
  int64_t hidden_size = 1152;
  int64_t intermediate_size = 4304;
  int64_t num_layers = 27;
  int64_t num_heads = 16;
  double layer_norm_eps = 1e-6;
  // vision_feature_layer: the hidden state the projector reads, as an index into the tower's
  // hidden_states tuple (embeddings, layer 1, ..., layer N): -1 = after the last layer, before
  // post_layernorm (which the checkpoint carries but this path never applies).
  int64_t feature_layer = -1;
  // Projector: linear_1 (vision hidden -> text hidden) -> GELU (erf) -> linear_2, with biases.
  bool projector_bias = true;
  // Text side, copied here so the vision code needs nothing else.
  int64_t text_hidden_size = 0;

  int64_t image_token_id = -1;  // image_token_index: <|image_pad|>
  int64_t video_token_id = -1;  // video_token_index: <|video_pad|>
  // image_grid_pinpoints as (height, width) pairs, and anyres_max_N's N.
  std::vector<std::pair<int64_t, int64_t>> grid_pinpoints;
  int64_t max_num_patches = 9;
  bool use_image_newline = true;

  // preprocessor_config.json (the config's values when that file is absent)
  std::array<float, 3> image_mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std{0.5f, 0.5f, 0.5f};
  double rescale_factor = 1.0 / 255.0;

  int64_t patches_per_side() const { return image_size / patch_size; }                  // 27
  int64_t patches_per_crop() const { return patches_per_side() * patches_per_side(); }  // 729
  // Number of tower layers run to reach feature_layer.
  int64_t layers_to_run() const {
    return feature_layer < 0 ? num_layers + 1 + feature_layer : feature_layer;
  }
  // Side of a video frame's pooled grid: ceil(27 / 2) = 14 (196 tokens per frame).
  int64_t pooled_side() const { return (patches_per_side() + 1) / 2; }
};

// config.json of an sdar_v checkpoint (top level + vision_config); `text` is the language model's
// parsed config (hidden size, vocabulary for the placeholder ids).
VisionConfig read_vision_config(const nlohmann::json& config, const ModelConfig& text,
                                const std::string& source);
// preprocessor_config.json: image_mean, image_std, rescale_factor; resample must be bicubic.
void read_preprocessor_config(VisionConfig& vc, const nlohmann::json& pre,
                              const std::string& source);

}  // namespace dllm
