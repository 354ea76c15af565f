#include "vision/image_processor.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "vision/resize_bicubic.h"

namespace dllm {

RgbImage anyres_canvas(const RgbImage& image, const VisionConfig& vc) {
  const Size2 best = select_best_resolution({image.height, image.width}, vc);
  const Size2 fit = fit_inside({image.height, image.width}, best);
  const RgbImage resized = resize_bicubic(image, fit.width, fit.height);
  RgbImage canvas(best.width, best.height);  // zero-filled: black padding
  const int64_t left = (best.width - fit.width) / 2, top = (best.height - fit.height) / 2;
  for (int64_t y = 0; y < fit.height; ++y)
    std::copy_n(resized.row(y), fit.width * 3, canvas.row(top + y) + left * 3);
  return canvas;
}

namespace {

// Writes the s x s crop of `picture` at (x0, y0), normalised, channels first, to dst.
void write_crop(const RgbImage& picture, int64_t x0, int64_t y0, const VisionConfig& vc,
                float* dst) {
  const int64_t s = vc.image_size;
  if (x0 + s > picture.width || y0 + s > picture.height)
    fail("append_crop: crop at (", x0, ", ", y0, ") leaves the ", picture.width, "x",
         picture.height, " picture");
  // Same float operations as the processor: x * rescale_factor, then (x - mean) / std.
  const float rescale = static_cast<float>(vc.rescale_factor);
  for (int c = 0; c < 3; ++c) {
    const float mean = vc.image_mean[static_cast<size_t>(c)];
    const float std = vc.image_std[static_cast<size_t>(c)];
    for (int64_t y = 0; y < s; ++y) {
      const uint8_t* src = picture.row(y0 + y) + x0 * 3 + c;
      float* row = dst + (c * s + y) * s;
      for (int64_t x = 0; x < s; ++x)
        row[x] = (static_cast<float>(src[x * 3]) * rescale - mean) / std;
    }
  }
}

}  // namespace

void append_crop(const RgbImage& picture, int64_t x0, int64_t y0, const VisionConfig& vc,
                 PixelCrops& out) {
  const int64_t s = vc.image_size;
  const size_t base = out.values.size();
  out.values.resize(base + static_cast<size_t>(3 * s * s));
  write_crop(picture, x0, y0, vc, out.values.data() + base);
  out.crops += 1;
  out.side = s;
}

PixelCrops preprocess_image(const RgbImage& image, const VisionConfig& vc) {
  PixelCrops out;
  append_crop(resize_bicubic(image, vc.image_size, vc.image_size), 0, 0, vc, out);
  const RgbImage canvas = anyres_canvas(image, vc);
  for (int64_t y = 0; y < canvas.height; y += vc.image_size)
    for (int64_t x = 0; x < canvas.width; x += vc.image_size) append_crop(canvas, x, y, vc, out);
  return out;
}

PixelCrops preprocess_frames(const std::vector<RgbImage>& frames, const VisionConfig& vc) {
  PixelCrops out;
  out.crops = static_cast<int64_t>(frames.size());
  out.side = vc.image_size;
  out.values.resize(static_cast<size_t>(out.crops * 3 * out.side * out.side));
  preprocess_frames_into(frames, vc, out.values.data());
  return out;
}

void preprocess_frames_into(std::span<const RgbImage> frames, const VisionConfig& vc, float* dst) {
  // Frames are independent: each is resized and normalised into its own slot on its own
  // thread (a 64-frame video is 64 bicubic resizes, the bulk of a video prompt's host work).
  const int64_t s = vc.image_size;
  parallel_for(static_cast<int64_t>(frames.size()), [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i)
      write_crop(resize_bicubic(frames[static_cast<size_t>(i)], s, s), 0, 0, vc,
                 dst + i * 3 * s * s);
  });
}

}  // namespace dllm
