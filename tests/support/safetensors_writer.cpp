#include "support/safetensors_writer.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace dllm::test {

RawTensor f32_tensor(const std::string& name, std::vector<int64_t> shape,
                     const std::vector<float>& values) {
  RawTensor t{name, "F32", std::move(shape), std::vector<unsigned char>(values.size() * 4)};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

RawTensor bf16_tensor(const std::string& name, std::vector<int64_t> shape,
                      const std::vector<float>& values) {
  RawTensor t{name, "BF16", std::move(shape), std::vector<unsigned char>(values.size() * 2)};
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t b = f32_to_bf16(values[i]);
    std::memcpy(&t.bytes[2 * i], &b, 2);
  }
  return t;
}

RawTensor f16_tensor(const std::string& name, std::vector<int64_t> shape,
                     const std::vector<uint16_t>& bits) {
  RawTensor t{name, "F16", std::move(shape), std::vector<unsigned char>(bits.size() * 2)};
  std::memcpy(t.bytes.data(), bits.data(), t.bytes.size());
  return t;
}

std::string safetensors_raw(const std::string& header_json, const std::string& data) {
  std::string header = header_json;
  while ((header.size() + 8) % 8 != 0) header += ' ';
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string safetensors_bytes(const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
  return safetensors_raw(header.dump(), data);
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace dllm::test
