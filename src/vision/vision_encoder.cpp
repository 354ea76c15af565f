// The host packing every encoder may fall back on (vision_encoder.h).
#include "vision/vision_encoder.h"

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

}  // namespace dllm
