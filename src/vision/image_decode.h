// Image decoding for vision prompts: JPEG (libjpeg-turbo; CMYK and YCCK too), PNG (libpng) and
// still WebP (libwebp; lossy, lossless, with alpha), to 8-bit RGB as PIL's
// Image.open(...).convert("RGB") gives it (alpha dropped, grey and palettes expanded, 16-bit
// samples cut to their high byte, CMYK read inverted as Adobe writes it and converted with PIL's
// formula). Untrusted input: the format is read from the magic bytes, the dimensions are checked
// before any pixel memory is allocated (a decompression bomb is refused), and truncated or corrupt
// data is an Error naming the source, never a crash. EXIF orientation is not applied: SDAR-VL's
// generate.py passes PIL.Image.open's picture to the processor, and neither rotates it (checked
// against Pillow by tests/vision/image_formats_test.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "vision/rgb_image.h"

namespace dllm {

struct ImageLimits {
  int64_t max_side = 16384;               // pixels along either side
  int64_t max_pixels = int64_t{1} << 26;  // 64 Mpixel (PIL's bomb guard warns at 89 M)
  // Videos: the RGB bytes of all sampled frames together (1024 frames of 64 Mpixel would be
  // 200 GB; a server takes num_frames from its clients).
  int64_t max_video_bytes = int64_t{4} << 30;
};

// `source` names the image in errors (a path, "request image 2").
RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& source,
                      const ImageLimits& limits = {});
RgbImage read_image_file(const std::filesystem::path& path, const ImageLimits& limits = {});

}  // namespace dllm
