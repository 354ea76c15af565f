// An 8-bit RGB picture, rows top to bottom, pixels interleaved R, G, B — what the decoders
// produce and the processor resizes (PIL's mode "RGB").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dllm {

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;  // [height, width, 3]

  RgbImage() = default;
  RgbImage(int64_t w, int64_t h) : width(w), height(h), pixels(static_cast<size_t>(w * h * 3)) {}
  uint8_t* row(int64_t y) { return pixels.data() + y * width * 3; }
  const uint8_t* row(int64_t y) const { return pixels.data() + y * width * 3; }
};

}  // namespace dllm
