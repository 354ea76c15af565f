// LLaVA-OneVision "anyres" geometry (model-specs §7; transformers' select_best_resolution,
// get_patch_output_size, unpad_image, the processor's token count): which pinpoint an image is
// tiled to, how large it is drawn there, and the feature grid left after unpadding and the
// anyres_max_N downscale. Pure arithmetic, shared by the processor, the feature packing and the
// placeholder expansion so the three always agree.
#pragma once

#include <cstdint>
#include <utility>

#include "vision/vision_config.h"

namespace dllm {

struct Size2 {
  int64_t height = 0, width = 0;
};

// The pinpoint that keeps the most of the image's resolution, then wastes the least canvas.
Size2 select_best_resolution(Size2 image, const VisionConfig& vc);
// The image's size when scaled (aspect kept) to fit inside `target`.
Size2 fit_inside(Size2 image, Size2 target);

// The image's feature grid (in patches) over its tiles, after unpadding and the downscale.
struct FeatureGrid {
  int64_t tiles_high = 0, tiles_wide = 0;  // crops of the pinpoint canvas
  int64_t rows = 0, cols = 0;              // unpadded grid (before the downscale)
  int64_t top = 0, left = 0;               // where it starts in the full tile grid
  bool downscaled = false;                 // anyres_max_N: bilinear to out_rows x out_cols
  int64_t out_rows = 0, out_cols = 0;
};
FeatureGrid image_feature_grid(Size2 image, const VisionConfig& vc);

// Features (= placeholder tokens) of one image: the base crop, the grid, one newline per row.
int64_t image_token_count(Size2 image, const VisionConfig& vc);
// Features of one video of `frames` frames: pooled grid per frame, then one newline.
int64_t video_token_count(int64_t frames, const VisionConfig& vc);

}  // namespace dllm
