// Writes a random-weight checkpoint directory (config.json + model.safetensors) for tests that
// need shapes the committed fixtures do not have (e.g. a real 151k-token vocabulary).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace dllm::test {

void write_random_checkpoint(const std::filesystem::path& dir, const nlohmann::json& config,
                             uint64_t seed);

}  // namespace dllm::test
