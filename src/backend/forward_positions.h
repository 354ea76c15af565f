// Whether a forward's positions are 0, 1, 2, ...: a forward from the start of its sequence (a
// cold prefill, a dLLM-Cache canvas, a shareable prompt prefix).
#pragma once

#include <cstdint>
#include <span>

namespace dllm {

inline bool positions_from_zero(std::span<const int32_t> positions) {
  for (size_t i = 0; i < positions.size(); ++i)
    if (positions[i] != static_cast<int32_t>(i)) return false;
  return true;
}

}  // namespace dllm
