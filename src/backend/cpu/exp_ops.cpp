// The portable kernels of exp_ops.h and the dispatch to the AVX2 ones.
#include "backend/cpu/exp_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dllm::cpu {

bool exp_ops_avx2_available() {
  static const bool available = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return available;
}

bool exp_ops_avx512_available() {
  static const bool available = exp_ops_avx2_available() && __builtin_cpu_supports("avx512f");
  return available;
}

bool softmax_row_portable(float* s, const uint8_t* visible, int64_t n, float scale) {
  for (int64_t j = 0; j < n; ++j) s[j] *= scale;
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j)
    if (visible[j]) mx = std::max(mx, s[j]);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill_n(s, n, 0.0f);
    return false;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = visible[j] ? std::exp(s[j] - mx) : 0.0f;
    sum += s[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  return true;
}

void silu_mul_portable(const float* gate, const float* up, float* out, int64_t first,
                       int64_t last) {
  for (int64_t i = first; i < last; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

bool softmax_row(float* s, const uint8_t* visible, int64_t n, float scale) {
  if (exp_ops_avx512_available()) return softmax_row_avx512(s, visible, n, scale);
  if (exp_ops_avx2_available()) return softmax_row_avx2(s, visible, n, scale);
  return softmax_row_portable(s, visible, n, scale);
}

void softmax_rows(float* s, const uint8_t* visible, int64_t n, int64_t rows, float scale,
                  bool* seen) {
  if (exp_ops_avx512_available()) {
    softmax_rows_avx512(s, visible, n, rows, scale, seen);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const bool any = softmax_row(s + r * n, visible + r * n, n, scale);
    if (seen) seen[r] = any;
  }
}

void silu_mul_range(const float* gate, const float* up, float* out, int64_t first, int64_t last) {
  if (exp_ops_avx512_available())
    silu_mul_avx512(gate, up, out, first, last);
  else if (exp_ops_avx2_available())
    silu_mul_avx2(gate, up, out, first, last);
  else
    silu_mul_portable(gate, up, out, first, last);
}

}  // namespace dllm::cpu
