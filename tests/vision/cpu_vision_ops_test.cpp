// The vision tower's CPU building blocks against naive double-precision references on fresh
// random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_vision_ops.h"

namespace dllm {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

TEST(CpuVisionOps, LayerNormMatchesNaive) {
  const int64_t rows = 7, dim = 53;
  auto x = random_values(rows * dim, 1, 3.0f), w = random_values(dim, 2), b = random_values(dim, 3);
  for (float& v : x) v += 5.0f;  // an offset the mean must remove
  std::vector<float> out(x.size());
  cpu::layer_norm(x.data(), w.data(), b.data(), out.data(), rows, dim, 1e-6f);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += x[r * dim + i];
    mean /= dim;
    for (int64_t i = 0; i < dim; ++i) var += std::pow(x[r * dim + i] - mean, 2);
    var /= dim;
    for (int64_t i = 0; i < dim; ++i) {
      const double want = (x[r * dim + i] - mean) / std::sqrt(var + 1e-6) * w[i] + b[i];
      EXPECT_NEAR(out[r * dim + i], want, 1e-5 * (1 + std::abs(want)));
    }
  }
}

TEST(CpuVisionOps, GeluFormsMatchNaive) {
  auto x = random_values(1000, 4, 3.0f);
  auto t = x, e = x;
  cpu::gelu_tanh(t.data(), static_cast<int64_t>(t.size()));
  cpu::gelu_erf(e.data(), static_cast<int64_t>(e.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double want_t =
        0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    const double want_e = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    EXPECT_NEAR(t[i], want_t, 1e-5 * (1 + std::abs(want_t)));
    EXPECT_NEAR(e[i], want_e, 1e-5 * (1 + std::abs(want_e)));
  }
}

// torch.nn.functional.interpolate(mode="bilinear", align_corners=False), written out.
TEST(CpuVisionOps, BilinearResizeMatchesNaive) {
  for (auto [h, w, oh, ow] :
       {std::array<int64_t, 4>{27, 27, 14, 14}, {81, 108, 72, 96}, {5, 9, 11, 4}, {6, 6, 6, 6}}) {
    const int64_t c = 3;
    auto in = random_values(h * w * c, 5);
    std::vector<float> out(oh * ow * c);
    cpu::bilinear_resize(in.data(), h, w, c, out.data(), oh, ow);
    auto src = [](int64_t o, int64_t n_in, int64_t n_out) {
      double s = (o + 0.5) * double(n_in) / double(n_out) - 0.5;
      return std::max(s, 0.0);
    };
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t x = 0; x < ow; ++x) {
        const double sy = src(y, h, oh), sx = src(x, w, ow);
        const int64_t y0 = int64_t(sy), x0 = int64_t(sx);
        const int64_t y1 = std::min(y0 + 1, h - 1), x1 = std::min(x0 + 1, w - 1);
        const double ly = sy - y0, lx = sx - x0;
        for (int64_t k = 0; k < c; ++k) {
          auto at = [&](int64_t yy, int64_t xx) { return double(in[(yy * w + xx) * c + k]); };
          const double want = (1 - ly) * ((1 - lx) * at(y0, x0) + lx * at(y0, x1)) +
                              ly * ((1 - lx) * at(y1, x0) + lx * at(y1, x1));
          EXPECT_NEAR(out[(y * ow + x) * c + k], want, 1e-5) << h << "x" << w << "->" << oh;
        }
      }
  }
}

}  // namespace
}  // namespace dllm
