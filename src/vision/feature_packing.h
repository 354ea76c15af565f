// From per-crop projected features to the rows that replace the placeholder tokens
// (model-specs §7; SDAR-VL's LlavaOnevisionModel.pack_image_features / get_video_features):
//   image: the base crop's 729 rows, then the tile grid unpadded to the image's aspect, shrunk
//          bilinearly when larger than anyres_max_N crops allow, row by row with image_newline
//          after each row;
//   video: each frame's 27x27 grid bilinearly pooled to 14x14, frames in order, then one
//          image_newline.
#pragma once

#include <span>
#include <vector>

#include "vision/anyres.h"

namespace dllm {

// crop_features: [1 + tiles, patches_per_crop, D] from VisionEncoder::encode; newline: [D].
std::vector<float> pack_image_features(std::span<const float> crop_features, Size2 image,
                                       std::span<const float> newline, const VisionConfig& vc);
// frame_features: [frames, patches_per_crop, D].
std::vector<float> pack_video_features(std::span<const float> frame_features, int64_t frames,
                                       std::span<const float> newline, const VisionConfig& vc);

}  // namespace dllm
