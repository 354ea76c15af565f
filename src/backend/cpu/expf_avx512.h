// expf for 16 floats at once in AVX-512F, with the bits of glibc's expf: expf_avx2.h's algorithm
// (the same double-precision steps and constants, lane for lane), in 512-bit registers, and its
// 32-entry table read by two-register permutes instead of a gather. tests/backend/exp_ops_test.cpp
// compares it with std::exp as it does the AVX2 one.
//
// Include only from files compiled with -mavx2 -mfma -mavx512f -ffp-contract=off (CMakeLists.txt).
#pragma once

#include "backend/cpu/avx512_intrinsics.h"

#include "backend/cpu/expf_avx2.h"

namespace dllm::cpu::expf_detail {
namespace {

// exp2_table().bits[i & 31] for each lane's i: entries 0-15 and 16-31 in two register pairs,
// bit 4 of the index picks the pair.
inline __m512i table_lookup(__m512i idx) {
  const int64_t* t = exp2_table().bits;
  const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 8);
  const __m512i t2 = _mm512_loadu_si512(t + 16), t3 = _mm512_loadu_si512(t + 24);
  const __m512i lo = _mm512_permutex2var_epi64(t0, idx, t1);  // uses bits 0-3
  const __m512i hi = _mm512_permutex2var_epi64(t2, idx, t3);
  return _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
}

// The main path for 8 values (in double): expf4_main's steps.
inline __m256 expf8_main(__m256 x) {
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d inv = _mm512_set1_pd(kInvLn2N), shift = _mm512_set1_pd(kShift);
  __m512d kd = _mm512_fmadd_pd(inv, xd, shift);
  const __m512i ki = _mm512_castpd_si512(kd);
  kd = _mm512_sub_pd(kd, shift);
  const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
  __m512i t = table_lookup(_mm512_and_si512(ki, _mm512_set1_epi64(31)));
  t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
  const __m512d s = _mm512_castsi512_pd(t);
  const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(kC0), r, _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(kC2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

}  // namespace

// expf of each lane, bit-identical to glibc's (and to expf8).
inline __m512 expf16(__m512 x) {
  const __m256 x_lo = _mm512_castps512_ps256(x);
  const __m256 x_hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
  __m512 y = _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(expf8_main(x_lo))),
                         _mm256_castps_pd(expf8_main(x_hi)), 1));
  // glibc's special cases for |x| >= 88 (rare: one compare when none applies).
  if (_mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(88.0f), _CMP_NLT_UQ) == 0) return y;
  const __mmask16 uflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ);
  const __mmask16 may_uflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-0x1.9d1d9ep6f), _CMP_LT_OQ);
  const __mmask16 oflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  y = _mm512_mask_blend_ps(may_uflow, y, _mm512_set1_ps(0x1p-149f));
  y = _mm512_mask_blend_ps(uflow, y, _mm512_setzero_ps());  // -inf included
  y = _mm512_mask_blend_ps(oflow, y, _mm512_set1_ps(INFINITY));
  return _mm512_mask_blend_ps(nan, y, _mm512_add_ps(x, x));
}

}  // namespace dllm::cpu::expf_detail
