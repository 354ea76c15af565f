// Storage dtypes of checkpoint tensors and their conversion to fp32 (the CPU compute type).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace dllm {

enum class DType { kF32, kF16, kBF16 };

std::string_view dtype_name(DType dtype);  // "F32", "F16", "BF16" as safetensors spells them
size_t dtype_size(DType dtype);            // bytes per element
std::optional<DType> parse_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round-to-nearest-even, NaN preserved (what torch does for .to(torch.bfloat16)).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t bits);

// Converts n elements stored at `src` (any alignment) in `dtype` to fp32.
void convert_to_f32(DType dtype, const void* src, float* dst, size_t n);

}  // namespace dllm
