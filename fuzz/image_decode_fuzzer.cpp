// libFuzzer: bytes a client sends as an image (a server's data: URL, a --image file) through the
// vision decoder — JPEG (libjpeg-turbo, CMYK included), PNG (libpng), WebP (libwebp). Only
// dllm::Error may come out; limits smaller than the defaults keep each input's memory small.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "vision/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const dllm::ImageLimits limits{4096, int64_t{1} << 22};
  try {
    const dllm::RgbImage img = dllm::decode_image(std::span(data, size), "fuzz input", limits);
    if (img.pixels.size() != static_cast<size_t>(img.width * img.height * 3)) __builtin_trap();
  } catch (const dllm::Error&) {
  }
  return 0;
}
