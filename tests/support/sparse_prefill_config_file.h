// A sparse prefill config (MInference's per-layer form) for the embedded tiny-block model (6
// layers, 8 heads) in which every head runs the same entry, e.g. R"(["stream_llm", 8, 64])".
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace dllm::test {

inline void write_tiny_block_sparse_config(const std::filesystem::path& path,
                                           const std::string& per_head) {
  std::string json = "{";
  for (int l = 0; l < 6; ++l) {
    json += (l ? "," : "") + std::string("\"layer-") + std::to_string(l) + "\": {";
    for (int h = 0; h < 8; ++h)
      json += (h ? "," : "") + std::string("\"") + std::to_string(h) + "\": " + per_head;
    json += "}";
  }
  std::ofstream(path) << json + "}";
}

}  // namespace dllm::test
