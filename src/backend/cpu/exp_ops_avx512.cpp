// AVX-512F kernels of exp_ops.h (this file alone is compiled with -mavx2 -mfma -mavx512f
// -ffp-contract=off; CMakeLists.txt): the portable kernels' operations, sixteen values at a time,
// with glibc's expf bits (expf_avx512.h). As in the AVX2 kernels, the softmax's sum stays one
// double accumulation in index order.
#include "backend/cpu/avx512_intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/exp_ops.h"
#include "backend/cpu/expf_avx512.h"

namespace dllm::cpu {
namespace {

// Lane l set where visible[l] != 0.
__mmask16 visible_mask(const uint8_t* visible) {
  const __m512i v =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(visible)));
  return _mm512_test_epi32_mask(v, v);
}

// Scales s in place and returns the largest visible value (-inf when none is).
float scale_and_max(float* s, const uint8_t* visible, int64_t n, float scale) {
  const __m512 sc = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx16 = neg_inf;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s + j), sc);
    _mm512_storeu_ps(s + j, v);
    // maxps returns its second operand when the first is NaN, as std::max(mx, s) keeps mx.
    mx16 = _mm512_max_ps(_mm512_mask_blend_ps(visible_mask(visible + j), neg_inf, v), mx16);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mx16);
  float mx = -std::numeric_limits<float>::infinity();
  for (float l : lanes) mx = std::max(mx, l);
  for (; j < n; ++j) {
    s[j] *= scale;
    if (visible[j]) mx = std::max(mx, s[j]);
  }
  return mx;
}

// s[j] = visible ? exp(s[j] - mx) : 0 over the row (no sum).
void exponentiate(float* s, const uint8_t* visible, int64_t n, float mx) {
  const __m512 mx16 = _mm512_set1_ps(mx);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = expf_detail::expf16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mx16));
    _mm512_storeu_ps(s + j, _mm512_maskz_mov_ps(visible_mask(visible + j), e));
  }
  for (; j < n; ++j) s[j] = visible[j] ? std::exp(s[j] - mx) : 0.0f;
}

void normalize(float* s, int64_t n, double sum) {
  const float inv = static_cast<float>(1.0 / sum);
  const __m512 inv16 = _mm512_set1_ps(inv);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(s + j, _mm512_mul_ps(_mm512_loadu_ps(s + j), inv16));
  for (; j < n; ++j) s[j] *= inv;
}

// Each of K rows' sum in double, in index order — K independent chains of dependent additions
// side by side (one row's chain bounds a row at one addition's latency per value).
template <int K>
void sum_rows(float* const* row, int64_t n, double* sum) {
  double acc[K] = {};
  for (int64_t j = 0; j < n; ++j)
    for (int k = 0; k < K; ++k) acc[k] += row[k][j];
  for (int k = 0; k < K; ++k) sum[k] = acc[k];
}

using SumRowsFn = void (*)(float* const*, int64_t, double*);
constexpr SumRowsFn kSumRows[] = {nullptr, sum_rows<1>, sum_rows<2>, sum_rows<3>, sum_rows<4>};

}  // namespace

bool softmax_row_avx512(float* s, const uint8_t* visible, int64_t n, float scale) {
  bool seen;
  softmax_rows_avx512(s, visible, n, 1, scale, &seen);
  return seen;
}

void softmax_rows_avx512(float* s, const uint8_t* visible, int64_t n, int64_t rows, float scale,
                         bool* seen) {
  constexpr int kGroup = 4;
  static_assert(kGroup + 1 == sizeof(kSumRows) / sizeof(kSumRows[0]));
  for (int64_t r0 = 0; r0 < rows; r0 += kGroup) {
    float* active[kGroup];
    int k = 0;
    for (int64_t r = r0; r < std::min(rows, r0 + kGroup); ++r) {
      float* row = s + r * n;
      const uint8_t* vis = visible + r * n;
      const float mx = scale_and_max(row, vis, n, scale);
      const bool any = mx != -std::numeric_limits<float>::infinity();
      if (seen) seen[r] = any;
      if (!any) {
        std::fill_n(row, n, 0.0f);
        continue;
      }
      exponentiate(row, vis, n, mx);
      active[k++] = row;
    }
    double sum[kGroup];
    if (k > 0) kSumRows[k](active, n, sum);
    for (int a = 0; a < k; ++a) normalize(active[a], n, sum[a]);
  }
}

void silu_mul_avx512(const float* gate, const float* up, float* out, int64_t first, int64_t last) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  int64_t i = first;
  for (; i + 16 <= last; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    // exp(-g), the negation a sign flip as in -g (NaNs included).
    const __m512 e =
        expf_detail::expf16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign)));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
  }
  silu_mul_portable(gate, up, out, i, last);
}

void expf_avx512(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, expf_detail::expf16(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) out[i] = std::exp(x[i]);
}

}  // namespace dllm::cpu
