// Random weights for a vision-language shape (configs/sdar-vl-8b.json): the language model as
// make_random_model draws it, plus every tensor VisionModel resolves (SigLIP tower, projector,
// image_newline) from the same seeded generator — benchmarks need no checkpoint.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "vision/vision_model.h"

namespace dllm {

struct RandomVisionLanguageModel {
  std::unique_ptr<Model> model;          // the language model's tensors + the vision side's
  std::unique_ptr<VisionModel> vision;   // null when `config` has no vision side
};

// `config` is a config.json; an sdar_v one (model_type) gets the vision tensors too.
RandomVisionLanguageModel make_random_vision_language_model(const nlohmann::json& config,
                                                            uint64_t seed);

}  // namespace dllm
