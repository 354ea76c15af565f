// Bicubic resampling of 8-bit RGB exactly as torchvision's F.resize(uint8 image, BICUBIC,
// antialias=True) computes it on the CPU (torch's uint8 antialiased kernel), the resize of
// LlavaOnevisionImageProcessorFast, which SDAR-VL's preprocessor_config.json names: Keys cubic
// with a = -0.5, support widened by the scale factor when shrinking (antialiasing), coefficients
// normalised per output pixel and rounded to int16 fixed point at the largest precision (at most
// 22 bits) that keeps the largest one below 2^15, a horizontal pass then a vertical pass, each
// rounded and clipped to 8 bits. Pillow's Image.resize differs only in its precision (always 22
// bits): a level or two on a few pixels in a thousand (tools/compare_hf_processor.py measures
// it against transformers' processors).
#pragma once

#include "vision/rgb_image.h"

namespace dllm {

RgbImage resize_bicubic(const RgbImage& in, int64_t width, int64_t height);

}  // namespace dllm
