// JSON files of a checkpoint (config.json, generation_config.json, tokenizer files).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace dllm {

// Parses a whole JSON file; errors name the file (and the parse position).
nlohmann::json read_json_file(const std::filesystem::path& path);
// Same, but returns nullopt when the file does not exist.
std::optional<nlohmann::json> read_json_file_if_exists(const std::filesystem::path& path);
// Reads a whole file into a string; errors name the file.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace dllm
