// The LLaVA-OneVision image and video processor (model-specs §7; transformers'
// LlavaOnevisionImageProcessor / VideoProcessor with SDAR-VL's preprocessor_config.json):
//   image: the base crop = the whole image resized to image_size²; the anyres canvas = the image
//          resized (aspect kept) into the best pinpoint and centred on black (the odd pixel of
//          padding right / bottom), cut into image_size² crops row by row;
//   video: every frame resized to image_size².
// Each crop is rescaled (1/255) and normalised with image_mean / image_std, channels first.
#pragma once

#include <span>
#include <vector>

#include "vision/anyres.h"
#include "vision/rgb_image.h"

namespace dllm {

// Normalised crops ready for the vision tower.
struct PixelCrops {
  int64_t crops = 0, side = 0;
  std::vector<float> values;  // [crops, 3, side, side]
};

// The resized and letterboxed canvas at the best pinpoint (what the tiles are cut from).
RgbImage anyres_canvas(const RgbImage& image, const VisionConfig& vc);
// Base crop first, then the canvas tiles.
PixelCrops preprocess_image(const RgbImage& image, const VisionConfig& vc);
// One crop per frame.
PixelCrops preprocess_frames(const std::vector<RgbImage>& frames, const VisionConfig& vc);
// The same crops written to dst ([frames, 3, image_size, image_size]).
void preprocess_frames_into(std::span<const RgbImage> frames, const VisionConfig& vc, float* dst);
// Appends one image_size² picture (already that size) as a normalised crop.
void append_crop(const RgbImage& picture, int64_t x0, int64_t y0, const VisionConfig& vc,
                 PixelCrops& out);

}  // namespace dllm
