// Writes safetensors files for tests (valid ones, and raw bytes for corrupt ones).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dllm::test {

struct RawTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

RawTensor f32_tensor(const std::string& name, std::vector<int64_t> shape,
                     const std::vector<float>& values);
RawTensor bf16_tensor(const std::string& name, std::vector<int64_t> shape,
                      const std::vector<float>& values);
RawTensor f16_tensor(const std::string& name, std::vector<int64_t> shape,
                     const std::vector<uint16_t>& bits);

// Serialises tensors into a safetensors byte string (header padded to 8 bytes like the reference).
std::string safetensors_bytes(const std::vector<RawTensor>& tensors);
// Builds a file from an explicit header JSON text and data section (for hostile headers).
std::string safetensors_raw(const std::string& header_json, const std::string& data);
void write_file(const std::filesystem::path& path, const std::string& bytes);

}  // namespace dllm::test
