#include "vision/feature_packing.h"

#include <algorithm>

#include "backend/cpu/cpu_vision_ops.h"
#include "core/error.h"

namespace dllm {

std::vector<float> pack_image_features(std::span<const float> crop_features, Size2 image,
                                       std::span<const float> newline, const VisionConfig& vc) {
  const int64_t D = static_cast<int64_t>(newline.size()), side = vc.patches_per_side();
  const int64_t per_crop = vc.patches_per_crop() * D;
  const FeatureGrid g = image_feature_grid(image, vc);
  const int64_t crops = 1 + g.tiles_high * g.tiles_wide;
  if (static_cast<int64_t>(crop_features.size()) != crops * per_crop)
    fail("pack_image_features: ", crop_features.size() / std::max<int64_t>(per_crop, 1),
         " crops of features for an image tiled into ", crops);
  // The unpadded grid, channels last: grid[r][c] = patch (top + r, left + c) of the tile grid.
  std::vector<float> grid(static_cast<size_t>(g.rows * g.cols * D));
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.cols; ++c) {
      const int64_t R = g.top + r, C = g.left + c;
      const int64_t tile = 1 + (R / side) * g.tiles_wide + C / side;
      const float* src =
          crop_features.data() + tile * per_crop + ((R % side) * side + C % side) * D;
      std::copy_n(src, D, grid.data() + (r * g.cols + c) * D);
    }
  if (g.downscaled) {
    std::vector<float> small(static_cast<size_t>(g.out_rows * g.out_cols * D));
    cpu::bilinear_resize(grid.data(), g.rows, g.cols, D, small.data(), g.out_rows, g.out_cols);
    grid.swap(small);
  }
  std::vector<float> out(crop_features.begin(), crop_features.begin() + per_crop);  // base crop
  out.reserve(static_cast<size_t>(image_token_count(image, vc) * D));
  for (int64_t r = 0; r < g.out_rows; ++r) {
    out.insert(out.end(), grid.begin() + r * g.out_cols * D,
               grid.begin() + (r + 1) * g.out_cols * D);
    out.insert(out.end(), newline.begin(), newline.end());
  }
  return out;
}

std::vector<float> pack_video_features(std::span<const float> frame_features, int64_t frames,
                                       std::span<const float> newline, const VisionConfig& vc) {
  const int64_t D = static_cast<int64_t>(newline.size()), side = vc.patches_per_side();
  const int64_t pooled = vc.pooled_side(), per_frame = vc.patches_per_crop() * D;
  if (static_cast<int64_t>(frame_features.size()) != frames * per_frame)
    fail("pack_video_features: features of ",
         frame_features.size() / std::max<int64_t>(per_frame, 1), " frames for ", frames);
  std::vector<float> out(static_cast<size_t>(video_token_count(frames, vc) * D));
  for (int64_t f = 0; f < frames; ++f)
    cpu::bilinear_resize(frame_features.data() + f * per_frame, side, side, D,
                         out.data() + f * pooled * pooled * D, pooled, pooled);
  std::copy(newline.begin(), newline.end(), out.end() - D);
  return out;
}

}  // namespace dllm
