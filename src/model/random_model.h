// Random-weight models of real shapes, no checkpoint needed: benchmarks (`dllm bench`, bench/) and
// tests build them from a config.json-style description.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
// kSharedByShape: one buffer of random values per (shape, center, scale), which every tensor of
// that kind views — for shapes whose distinct weights would not fit in host memory (LLaDA2.0-flash:
// 206 GB); the GPU still holds a copy per tensor, so timings are the same.
enum class RandomWeightStorage { kDistinct, kSharedByShape };
std::unique_ptr<Model> make_random_model(
    const nlohmann::json& config, uint64_t seed,
    const std::function<void(const AddRandomTensor&)>& extra = {},
    RandomWeightStorage storage = RandomWeightStorage::kDistinct);

// Whether distinct random weights of `config` take at most half of this machine's memory.
bool random_weights_fit_in_memory(const nlohmann::json& config);

}  // namespace dllm
