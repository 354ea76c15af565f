// fp32 building blocks of the vision tower on the CPU (SigLIP: LayerNorm with bias, tanh GELU;
// the LLaVA projector: erf GELU; feature pooling: bilinear resampling as torch's
// F.interpolate(mode="bilinear", align_corners=False)). Checked against naive references in
// tests/vision/cpu_vision_ops_test.cpp.
#pragma once

#include <cstdint>

namespace dllm::cpu {

// LayerNorm over rows of width dim: (x - mean) / sqrt(var + eps) * weight + bias (biased var).
void layer_norm(const float* x, const float* weight, const float* bias, float* out, int64_t rows,
                int64_t dim, float eps);
// x += bias, per row.
void add_bias(float* x, const float* bias, int64_t rows, int64_t dim);
// In place: gelu with the tanh approximation (gelu_pytorch_tanh) / the exact erf form (gelu).
void gelu_tanh(float* x, int64_t n);
void gelu_erf(float* x, int64_t n);
// Bilinear resampling of a channels-last grid in[h][w][c] to out[oh][ow][c], align_corners
// false, no antialiasing (torch's upsample_bilinear2d index and weight rules).
void bilinear_resize(const float* in, int64_t h, int64_t w, int64_t c, float* out, int64_t oh,
                     int64_t ow);

}  // namespace dllm::cpu
