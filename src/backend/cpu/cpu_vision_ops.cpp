#include "backend/cpu/cpu_vision_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"

namespace dllm::cpu {

void layer_norm(const float* x, const float* weight, const float* bias, float* out, int64_t rows,
                int64_t dim, float eps) {
  parallel_for(rows, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const float* xr = x + r * dim;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < dim; ++i) mean += xr[i];
      mean /= static_cast<double>(dim);
      for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var /= static_cast<double>(dim);
      const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
      const float m = static_cast<float>(mean);
      float* o = out + r * dim;
      for (int64_t i = 0; i < dim; ++i) o[i] = (xr[i] - m) * inv * weight[i] + bias[i];
    }
  });
}

void add_bias(float* x, const float* bias, int64_t rows, int64_t dim) {
  parallel_for(rows, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r)
      for (int64_t i = 0; i < dim; ++i) x[r * dim + i] += bias[i];
  });
}

void gelu_tanh(float* x, int64_t n) {
  const float k = std::sqrt(2.0f / static_cast<float>(M_PI));
  parallel_for(n, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const float v = x[i];
      x[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
    }
  });
}

void gelu_erf(float* x, int64_t n) {
  parallel_for(n, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i)
      x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
  });
}

namespace {
// torch's area_pixel_compute_source_index (align_corners false, linear) and the two taps.
struct LinearTap {
  int64_t i0, i1;
  float w0, w1;
};
std::vector<LinearTap> linear_taps(int64_t in, int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  std::vector<LinearTap> taps(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    float src = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    const auto i0 = static_cast<int64_t>(src);
    const float l1 = std::min(std::max(src - static_cast<float>(i0), 0.0f), 1.0f);
    taps[static_cast<size_t>(o)] = {i0, i0 + (i0 < in - 1 ? 1 : 0), 1.0f - l1, l1};
  }
  return taps;
}
}  // namespace

void bilinear_resize(const float* in, int64_t h, int64_t w, int64_t c, float* out, int64_t oh,
                     int64_t ow) {
  const auto ty = linear_taps(h, oh), tx = linear_taps(w, ow);
  parallel_for(oh, [&](int64_t first, int64_t last) {
    for (int64_t y = first; y < last; ++y) {
      const LinearTap& a = ty[static_cast<size_t>(y)];
      for (int64_t x = 0; x < ow; ++x) {
        const LinearTap& b = tx[static_cast<size_t>(x)];
        const float* p00 = in + (a.i0 * w + b.i0) * c;
        const float* p01 = in + (a.i0 * w + b.i1) * c;
        const float* p10 = in + (a.i1 * w + b.i0) * c;
        const float* p11 = in + (a.i1 * w + b.i1) * c;
        float* o = out + (y * ow + x) * c;
        for (int64_t k = 0; k < c; ++k)
          o[k] = a.w0 * (b.w0 * p00[k] + b.w1 * p01[k]) + a.w1 * (b.w0 * p10[k] + b.w1 * p11[k]);
      }
    }
  });
}

}  // namespace dllm::cpu
