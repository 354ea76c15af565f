// Bicubic resampling of 8-bit RGB exactly as PIL's Image.resize(size, Image.BICUBIC) computes it
// (libImaging/Resample.c): Keys cubic with a = -0.5, support widened by the scale factor when
// shrinking (antialiasing), coefficients normalised per output pixel and rounded to 22-bit fixed
// point, a horizontal pass then a vertical pass, each rounded and clipped to 8 bits. The
// LLaVA-OneVision processor resizes with PIL (slow processor) or torchvision's uint8 antialiased
// bicubic, which reproduces PIL's kernel (fast processor).
#pragma once

#include "vision/rgb_image.h"

namespace dllm {

RgbImage resize_bicubic(const RgbImage& in, int64_t width, int64_t height);

}  // namespace dllm
