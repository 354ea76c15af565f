#include "vision/resize_bicubic.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dllm {
namespace {

// Keys' cubic with a = -0.5, written as torch's aa_filter writes it (the last bits of the weights
// decide roundings).
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// Per output pixel: the first input pixel and the fixed-point weights of the window.
struct Taps {
  int64_t window = 0;
  int bits = 0;  // fixed-point precision of the weights
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;  // [out, window], each within int16
};

// torch's precision: the most bits (at most 22) that keep the largest weight below 2^15.
int int16_precision(double max_weight) {
  int bits = 0;
  while (bits < 22 && static_cast<int>(0.5 + max_weight * (1 << (bits + 1))) < (1 << 15)) ++bits;
  return bits;
}

Taps compute_taps(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  const double inv_filter_scale = 1.0 / filter_scale;  // multiplied by, as torch and PIL do
  Taps t;
  t.window = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out_size));
  t.count.resize(static_cast<size_t>(out_size));
  t.weights.assign(static_cast<size_t>(out_size * t.window), 0);
  std::vector<double> w(static_cast<size_t>(out_size * t.window), 0.0);
  double max_weight = 0;
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    // C's (int) truncation (the operands are > -1 where it matters).
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size);
    const int64_t n = std::min(hi - lo, t.window);
    double* wo = &w[static_cast<size_t>(o * t.window)];
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      wo[i] = bicubic((static_cast<double>(i + lo) - center + 0.5) * inv_filter_scale);
      total += wo[i];
    }
    for (int64_t i = 0; i < n; ++i) {
      if (total != 0.0) wo[i] /= total;
      max_weight = std::max(max_weight, wo[i]);
    }
    t.first[static_cast<size_t>(o)] = lo;
    t.count[static_cast<size_t>(o)] = n;
  }
  t.bits = int16_precision(max_weight);
  for (size_t i = 0; i < w.size(); ++i) {
    const double v = w[i] * (1 << t.bits);
    t.weights[i] = static_cast<int32_t>(v < 0 ? -0.5 + v : 0.5 + v);
  }
  return t;
}

uint8_t clip8(int64_t v, int bits) {
  if (v <= 0) return 0;
  v >>= bits;
  return static_cast<uint8_t>(std::min<int64_t>(v, 255));
}

// One pass along x (horizontal) or y (vertical) over rows [0, out.height).
RgbImage resample_horizontal(const RgbImage& in, int64_t out_w, int64_t row0, int64_t rows) {
  const Taps t = compute_taps(in.width, out_w);
  RgbImage out(out_w, rows);
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = in.row(row0 + y);
    uint8_t* dst = out.row(y);
    for (int64_t x = 0; x < out_w; ++x) {
      const int32_t* k = &t.weights[static_cast<size_t>(x * t.window)];
      for (int c = 0; c < 3; ++c) {
        int64_t acc = int64_t{1} << (t.bits - 1);
        for (int64_t i = 0; i < t.count[static_cast<size_t>(x)]; ++i)
          acc += int64_t{src[(t.first[static_cast<size_t>(x)] + i) * 3 + c]} * k[i];
        dst[x * 3 + c] = clip8(acc, t.bits);
      }
    }
  }
  return out;
}

RgbImage resample_vertical(const RgbImage& in, const Taps& t, int64_t out_h, int64_t row0) {
  RgbImage out(in.width, out_h);
  for (int64_t y = 0; y < out_h; ++y) {
    const int32_t* k = &t.weights[static_cast<size_t>(y * t.window)];
    const int64_t first = t.first[static_cast<size_t>(y)] - row0;
    for (int64_t x = 0; x < in.width * 3; ++x) {
      int64_t acc = int64_t{1} << (t.bits - 1);
      for (int64_t i = 0; i < t.count[static_cast<size_t>(y)]; ++i)
        acc += int64_t{in.row(first + i)[x]} * k[i];
      out.row(y)[x] = clip8(acc, t.bits);
    }
  }
  return out;
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& in, int64_t width, int64_t height) {
  if (width < 1 || height < 1 || in.width < 1 || in.height < 1)
    fail("resize_bicubic: sizes must be positive (", in.width, "x", in.height, " -> ", width, "x",
         height, ")");
  if (width == in.width && height == in.height) return in;
  const Taps vertical = compute_taps(in.height, height);
  // Only the input rows the vertical pass reads go through the horizontal pass.
  const int64_t row0 = vertical.first.front();
  const int64_t row_end = vertical.first.back() + vertical.count.back();
  RgbImage cur = in;
  int64_t cur_row0 = 0;
  if (width != in.width) {
    cur = resample_horizontal(in, width, row0, row_end - row0);
    cur_row0 = row0;
  }
  if (height != in.height) return resample_vertical(cur, vertical, height, cur_row0);
  return cur;
}

}  // namespace dllm
