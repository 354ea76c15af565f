// AVX2 + FMA kernel of gemm_f32 (this file alone is compiled with -mavx2 -mfma; CMakeLists.txt).
//
// Register tile: R rows of a × C rows of w, one 8-lane accumulator per output element, so lane l
// of element (i, j) is partial sum p[l] of gemm_f32.h and the k loop is the fixed ascending
// chunk loop. W is read in place (no packing): for few rows every weight byte streams through
// once, for many rows a w tile stays in L1 while the row tiles pass over it.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/gemm_f32_tiles.h"

namespace dllm::cpu::gemm_detail {
namespace {

// 3 × 4 accumulators + 3 a vectors + 1 w vector = the 16 ymm registers.
constexpr int kRows = 3;
constexpr int kCols = 4;

// Lanes [0, rem) set: the zero-padded last chunk of gemm_f32.h step 1 (masked-off lanes read 0
// and never touch memory past the row).
__m256i tail_mask(int64_t rem) {
  alignas(32) static const int32_t kBits[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kBits + 8 - rem));
}

// Step 2 of gemm_f32.h for four accumulators at once: lane c of the result is
// ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) of v[c]. hadd adds neighbours within each
// 128-bit half; the last add joins the halves.
__m128 reduce4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Step 3: out = out + s or out = s for the first C lanes of s.
template <int C>
void store_row(float* out, __m128 s, bool accumulate) {
  if constexpr (C == 4) {
    _mm_storeu_ps(out, accumulate ? _mm_add_ps(_mm_loadu_ps(out), s) : s);
  } else {
    alignas(16) float v[4];
    _mm_store_ps(v, s);
    for (int c = 0; c < C; ++c) out[c] = accumulate ? out[c] + v[c] : v[c];
  }
}

template <int R, int C>
void micro_tile(const float* a, int64_t lda, const float* w, int64_t ldw, float* out, int64_t ldo,
                int64_t k, bool accumulate) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t k0 = 0;
  for (; k0 + 8 <= k; k0 += 8) {
    __m256 av[R];
    for (int r = 0; r < R; ++r) av[r] = _mm256_loadu_ps(a + r * lda + k0);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = _mm256_loadu_ps(w + c * ldw + k0);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(av[r], wv, acc[r][c]);
    }
  }
  if (k0 < k) {
    const __m256i mask = tail_mask(k - k0);
    __m256 av[R];
    for (int r = 0; r < R; ++r) av[r] = _mm256_maskload_ps(a + r * lda + k0, mask);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = _mm256_maskload_ps(w + c * ldw + k0, mask);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(av[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};  // columns past C reduce zeros and are not stored
    for (int c = 0; c < C; ++c) v[c] = acc[r][c];
    store_row<C>(out + r * ldo, reduce4(v[0], v[1], v[2], v[3]), accumulate);
  }
}

using MicroFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                         bool);

// kMicro[r - 1][c - 1] computes an r × c tile: the full 3 × 4 and the edges of the block.
constexpr MicroFn kMicro[kRows][kCols] = {
    {micro_tile<1, 1>, micro_tile<1, 2>, micro_tile<1, 3>, micro_tile<1, 4>},
    {micro_tile<2, 1>, micro_tile<2, 2>, micro_tile<2, 3>, micro_tile<2, 4>},
    {micro_tile<3, 1>, micro_tile<3, 2>, micro_tile<3, 3>, micro_tile<3, 4>},
};

}  // namespace

void tile_avx2(const float* a, int64_t lda, const float* w, int64_t ldw, float* out, int64_t ldo,
               int64_t m, int64_t n, int64_t k, bool accumulate) {
  // w tile outer: its kCols rows stay in L1 while every row tile of the block passes over them.
  for (int64_t j = 0; j < n; j += kCols) {
    const int64_t cols = std::min<int64_t>(kCols, n - j);
    for (int64_t i = 0; i < m; i += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, m - i);
      kMicro[rows - 1][cols - 1](a + i * lda, lda, w + j * ldw, ldw, out + i * ldo + j, ldo, k,
                                 accumulate);
    }
  }
}

}  // namespace dllm::cpu::gemm_detail
