#include "vision/anyres.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace dllm {

Size2 select_best_resolution(Size2 image, const VisionConfig& vc) {
  Size2 best;
  int64_t best_effective = 0;
  int64_t best_wasted = std::numeric_limits<int64_t>::max();
  const double h = static_cast<double>(image.height), w = static_cast<double>(image.width);
  for (const auto& [ph, pw] : vc.grid_pinpoints) {
    const double scale = std::min(static_cast<double>(pw) / w, static_cast<double>(ph) / h);
    const int64_t dw = static_cast<int64_t>(w * scale), dh = static_cast<int64_t>(h * scale);
    const int64_t effective = std::min(dw * dh, image.width * image.height);
    const int64_t wasted = ph * pw - effective;
    if (effective > best_effective || (effective == best_effective && wasted < best_wasted)) {
      best_effective = effective;
      best_wasted = wasted;
      best = {ph, pw};
    }
  }
  if (best.height == 0) fail("select_best_resolution: no image_grid_pinpoints");
  return best;
}

Size2 fit_inside(Size2 image, Size2 target) {
  const double scale_w = static_cast<double>(target.width) / static_cast<double>(image.width);
  const double scale_h = static_cast<double>(target.height) / static_cast<double>(image.height);
  if (scale_w < scale_h) {
    const auto h = static_cast<int64_t>(std::ceil(static_cast<double>(image.height) * scale_w));
    return {std::min(h, target.height), target.width};
  }
  const auto w = static_cast<int64_t>(std::ceil(static_cast<double>(image.width) * scale_h));
  return {target.height, std::min(w, target.width)};
}

namespace {
// Python's int(round(x, 7)) for the positive values unpad_image sees.
int64_t round7_trunc(double x) {
  return static_cast<int64_t>(std::nearbyint(x * 1e7) / 1e7);
}
}  // namespace

FeatureGrid image_feature_grid(Size2 image, const VisionConfig& vc) {
  const Size2 best = select_best_resolution(image, vc);
  const int64_t side = vc.patches_per_side();
  FeatureGrid g;
  g.tiles_high = best.height / vc.image_size;
  g.tiles_wide = best.width / vc.image_size;
  const int64_t full_rows = g.tiles_high * side, full_cols = g.tiles_wide * side;
  g.rows = full_rows;
  g.cols = full_cols;
  const double h = static_cast<double>(image.height), w = static_cast<double>(image.width);
  // unpad_image: crop the rows (or columns) that the letterbox padding produced.
  if (w / h > static_cast<double>(full_cols) / static_cast<double>(full_rows)) {
    const int64_t new_rows = round7_trunc(h * (static_cast<double>(full_cols) / w));
    const int64_t pad = (full_rows - new_rows) / 2;
    g.top = pad;
    g.rows = full_rows - 2 * pad;
  } else {
    const int64_t new_cols = round7_trunc(w * (static_cast<double>(full_rows) / h));
    const int64_t pad = (full_cols - new_cols) / 2;
    g.left = pad;
    g.cols = full_cols - 2 * pad;
  }
  g.out_rows = g.rows;
  g.out_cols = g.cols;
  const double ratio = std::sqrt(static_cast<double>(g.rows * g.cols) /
                                 static_cast<double>(vc.max_num_patches * side * side));
  if (ratio > 1.1) {
    g.downscaled = true;
    g.out_rows = static_cast<int64_t>(std::floor(static_cast<double>(g.rows) / ratio));
    g.out_cols = static_cast<int64_t>(std::floor(static_cast<double>(g.cols) / ratio));
  }
  return g;
}

int64_t image_token_count(Size2 image, const VisionConfig& vc) {
  const FeatureGrid g = image_feature_grid(image, vc);
  return vc.patches_per_crop() + g.out_rows * g.out_cols + g.out_rows;
}

int64_t video_token_count(int64_t frames, const VisionConfig& vc) {
  return frames * vc.pooled_side() * vc.pooled_side() + 1;
}

}  // namespace dllm
