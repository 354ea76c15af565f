// NumPy .npy files (format 1.0, little-endian, C order): float32 and int32 arrays. Used for
// `dllm forward --dump-logits` and for reading reference outputs in tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace dllm {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> f32;    // dtype '<f4'
  std::vector<int32_t> i32;  // dtype '<i4' or '<i8' (narrowed, range-checked)
  bool is_float = true;
};

void write_npy_f32(const std::filesystem::path& path, std::span<const float> data,
                   const std::vector<int64_t>& shape);
NpyArray read_npy(const std::filesystem::path& path);

}  // namespace dllm
