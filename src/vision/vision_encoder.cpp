// The host packing every encoder may fall back on (vision_encoder.h).
#include "vision/vision_encoder.h"

#include <future>

#include "vision/feature_packing.h"

namespace dllm {

std::vector<float> VisionEncoder::encode_image(const PixelCrops& crops, Size2 image,
                                               std::span<const float> newline) {
  return pack_image_features(encode(crops), image, newline, config());
}

std::vector<float> VisionEncoder::encode_video(const PixelCrops& frames, int64_t count,
                                               std::span<const float> newline) {
  return pack_video_features(encode(frames), count, newline, config());
}

std::vector<float> VisionEncoder::encode_video_frames(std::span<const RgbImage> frames,
                                                      std::span<const float> newline) {
  PixelCrops crops;
  crops.crops = static_cast<int64_t>(frames.size());
  crops.side = config().image_size;
  crops.values.resize(static_cast<size_t>(crops.crops * 3 * crops.side * crops.side));
  preprocess_frames_into(frames, config(), crops.values.data());
  return encode_video(crops, crops.crops, newline);
}

std::vector<std::vector<float>> encode_images(VisionEncoder& encoder,
                                              std::span<const RgbImage> images,
                                              std::span<const float> newline) {
  const VisionConfig& vc = encoder.config();
  const auto preprocess = [&vc](const RgbImage* image) { return preprocess_image(*image, vc); };
  std::vector<std::vector<float>> rows;
  std::future<PixelCrops> next;
  if (!images.empty()) next = std::async(std::launch::async, preprocess, &images[0]);
  for (size_t i = 0; i < images.size(); ++i) {
    const PixelCrops crops = next.get();
    if (i + 1 < images.size()) next = std::async(std::launch::async, preprocess, &images[i + 1]);
    rows.push_back(encoder.encode_image(crops, {images[i].height, images[i].width}, newline));
  }
  return rows;
}

}  // namespace dllm
