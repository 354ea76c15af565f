// expf for 8 floats at once in AVX2 + FMA, with the bits of glibc's expf (its algorithm since
// glibc 2.27, sysdeps/ieee754/flt-32/e_expf.c; checked against glibc 2.36's FMA variant, which
// x86-64 selects on an FMA CPU). The CPU forward calls std::exp(float) in its softmax and silu;
// a faster exp with other bits would move probabilities by an ulp and could flip a greedy
// trajectory, so this one reproduces glibc's algorithm step for step, fused multiply-adds where
// the FMA build has them (an exhaustive scan of (-103.9, 88.7): r = x·32/ln2 − k must be fused,
// as there, or 2 floats differ; the other steps give the same bits either way).
// tests/backend/exp_ops_test.cpp compares it with std::exp on every
// float of the range the softmax reaches and on a sample of all the others, so a libm with
// another expf fails there rather than in a trajectory:
//
//   exp(x) = 2^(k/32) · 2^(r/32),  k = round(x · 32/ln2),  r = x · 32/ln2 − k,
//   2^(k/32) from a 32-entry table, 2^(r/32) by a cubic, all in double, rounded once to float;
//   x < −103.97 gives 0, −103.97 ≤ x < −103.28 the smallest subnormal (glibc's "may underflow"),
//   x > 88.72 gives +inf, NaN gives NaN.
//
// Include only from files compiled with -mavx2 -mfma -ffp-contract=off (CMakeLists.txt).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dllm::cpu::expf_detail {
namespace {

// 2^(i/32) with i << 47 subtracted from its bits: adding ki << 47 back puts k / 32's integer part
// into the exponent (glibc's __exp2f_data.tab, computed here from the same definition).
struct Exp2Table {
  int64_t bits[32];
  Exp2Table() {
    for (int i = 0; i < 32; ++i) {
      const double v = static_cast<double>(std::exp2(static_cast<long double>(i) / 32));
      uint64_t u;
      std::memcpy(&u, &v, sizeof u);
      bits[i] = static_cast<int64_t>(u - (static_cast<uint64_t>(i) << 47));
    }
  }
};

inline const Exp2Table& exp2_table() {
  static const Exp2Table table;
  return table;
}

// glibc's __exp2f_data: invln2_scaled, shift, poly_scaled (N = 32).
constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32;
constexpr double kShift = 0x1.8p+52;
constexpr double kC0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32;
constexpr double kC1 = 0x1.ebfce50fac4f3p-3 / 32 / 32;
constexpr double kC2 = 0x1.62e42ff0c52d6p-1 / 32;

// The main path for 4 values (in double).
inline __m128 expf4_main(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d inv = _mm256_set1_pd(kInvLn2N), shift = _mm256_set1_pd(kShift);
  __m256d kd = _mm256_fmadd_pd(inv, xd, shift);
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, shift);
  const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
  const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(exp2_table().bits), idx, 8);
  t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
  const __m256d s = _mm256_castsi256_pd(t);
  const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(kC2), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

}  // namespace

// expf of each lane, bit-identical to glibc's.
inline __m256 expf8(__m256 x) {
  __m256 y = _mm256_set_m128(expf4_main(_mm256_extractf128_ps(x, 1)),
                             expf4_main(_mm256_castps256_ps128(x)));
  // glibc's special cases for |x| >= 88 (rare: one compare when none applies).
  const __m256 big =
      _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(88.0f), _CMP_NLT_UQ);
  if (_mm256_movemask_ps(big) == 0) return y;
  const __m256 uflow = _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ);
  const __m256 may_uflow = _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9d1d9ep6f), _CMP_LT_OQ);
  const __m256 oflow = _mm256_cmp_ps(x, _mm256_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(0x1p-149f), may_uflow);
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), uflow);  // -inf included
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), oflow);
  return _mm256_blendv_ps(y, _mm256_add_ps(x, x), nan);
}

}  // namespace dllm::cpu::expf_detail
