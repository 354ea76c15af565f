// Random-weight models of real shapes, no checkpoint needed: benchmarks (`dllm bench`, bench/) and
// tests build them from a config.json-style description.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "model/model.h"

namespace dllm {

// `config` is a config.json in any supported family dialect. Weights are bf16, drawn from a
// counter-based generator keyed by `seed` (same seed, same weights), scaled like a trained model
// (projections ~ 1/sqrt(fan_in), norm weights ~ 1).
// `extra` may add tensors the language model's family does not know of (the vision side of a
// vision-language model, vision/random_vision.h) through the same generator: add(name, shape,
// center, scale).
using AddRandomTensor =
    std::function<void(const std::string&, std::vector<int64_t>, float center, float scale)>;
std::unique_ptr<Model> make_random_model(
    const nlohmann::json& config, uint64_t seed,
    const std::function<void(const AddRandomTensor&)>& extra = {});

}  // namespace dllm
