// AVX2 + FMA kernels of exp_ops.h (this file alone is compiled with -mavx2 -mfma
// -ffp-contract=off; CMakeLists.txt): the portable kernels' operations, eight values at a time,
// with glibc's expf bits. The softmax's sum stays one double accumulation in index order;
// out-of-order execution overlaps it with the next chunk's exponentials.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/exp_ops.h"
#include "backend/cpu/expf_avx2.h"

namespace dllm::cpu {
namespace {

// All ones in lane l where visible[l] != 0.
__m256 visible_mask(const uint8_t* visible) {
  int64_t bytes;
  std::memcpy(&bytes, visible, sizeof bytes);
  const __m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(v, _mm256_setzero_si256()));
}

// Scales s in place and returns the largest visible value (-inf when none is).
float scale_and_max(float* s, const uint8_t* visible, int64_t n, float scale) {
  const __m256 sc = _mm256_set1_ps(scale), neg_inf = _mm256_set1_ps(-INFINITY);
  __m256 mx8 = neg_inf;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), sc);
    _mm256_storeu_ps(s + j, v);
    // maxps returns its second operand when the first is NaN, as std::max(mx, s) keeps mx.
    mx8 = _mm256_max_ps(_mm256_blendv_ps(neg_inf, v, visible_mask(visible + j)), mx8);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx8);
  float mx = -std::numeric_limits<float>::infinity();
  for (float l : lanes) mx = std::max(mx, l);
  for (; j < n; ++j) {
    s[j] *= scale;
    if (visible[j]) mx = std::max(mx, s[j]);
  }
  return mx;
}

}  // namespace

bool softmax_row_avx2(float* s, const uint8_t* visible, int64_t n, float scale) {
  const float mx = scale_and_max(s, visible, n, scale);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill_n(s, n, 0.0f);
    return false;
  }
  const __m256 mx8 = _mm256_set1_ps(mx);
  double sum = 0.0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = expf_detail::expf8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mx8));
    _mm256_storeu_ps(s + j, _mm256_and_ps(e, visible_mask(visible + j)));
    for (int l = 0; l < 8; ++l) sum += s[j + l];
  }
  for (; j < n; ++j) {
    s[j] = visible[j] ? std::exp(s[j] - mx) : 0.0f;
    sum += s[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  const __m256 inv8 = _mm256_set1_ps(inv);
  j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv8));
  for (; j < n; ++j) s[j] *= inv;
  return true;
}

void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t first, int64_t last) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = first;
  for (; i + 8 <= last; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = expf_detail::expf8(_mm256_xor_ps(g, sign));  // exp(-g)
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  silu_mul_portable(gate, up, out, i, last);
}

void expf_avx2(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, expf_detail::expf8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) out[i] = std::exp(x[i]);
}

}  // namespace dllm::cpu
