// AVX512-BF16 kernel of the opt-in bf16 GEMM (gemm_bf16.h states the arithmetic), compiled with
// -mavx512f -mavx512vl -mavx512bw -mavx512bf16 (CMakeLists.txt); call only where
// gemm_bf16_available(). 256-bit vectors with AVX-512VL's 32 registers, like the fp32 kernel's
// 6 × 4 tile: on Zen 4 a 512-bit vdpbf16ps is two 256-bit halves, so wider vectors would only
// halve the tiles.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "backend/cpu/gemm_f32_simd_tile.h"  // reduce4, store_sums: the fp32 kernel's step 3

namespace dllm::cpu::gemm_detail {
namespace {

constexpr int64_t kChunk = 16;  // bf16 values per vector: 8 lanes × 2 products

inline __m256bh as_bh(__m256i v) {
  return reinterpret_cast<__m256bh&>(v);
}

// An R × C output tile (dot_tile, not the fp32 header's micro_tile): rows of a (bf16, zero-padded to whole chunks) against C weight rows.
// The C weight vectors of a chunk are loaded once and kept; each row's vector is loaded once and
// meets all of them (R·C accumulators + C + 1 registers).
template <int R, int C>
void dot_tile(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                int64_t ldo, int64_t k, bool accumulate) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const auto step = [&](const __m256i (&wv)[C], int64_t k0) {
    for (int r = 0; r < R; ++r) {
      const __m256bh av =
          as_bh(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + r * lda + k0)));
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_dpbf16_ps(acc[r][c], av, as_bh(wv[c]));
    }
  };
  int64_t k0 = 0;
  for (; k0 + kChunk <= k; k0 += kChunk) {
    // One line of the next tile's weight rows per line consumed (gemm_f32_simd_tile.h: short
    // weight streams the hardware prefetcher barely ramps up on).
    if (k0 % 32 == 0)
      for (int c = 0; c < C; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(w + (c + C) * ldw + k0), _MM_HINT_T0);
    __m256i wv[C];
    for (int c = 0; c < C; ++c)
      wv[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c * ldw + k0));
    step(wv, k0);
  }
  if (k0 < k) {  // the zero-padded last chunk: masked-off weights read as +0, never past the row
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - k0)) - 1);
    __m256i wv[C];
    for (int c = 0; c < C; ++c) wv[c] = _mm256_maskz_loadu_epi16(mask, w + c * ldw + k0);
    step(wv, k0);
  }
  for (int r = 0; r < R; ++r) {
    __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
    for (int c = 0; c < C; ++c) v[c] = acc[r][c];
    store_sums(out + r * ldo, reduce4(v[0], v[1], v[2], v[3]), C, accumulate);
  }
}

using DotTileFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t,
                         int64_t, bool);

constexpr int kRows = 6, kCols = 4;

// kTable[r - 1][c - 1] = dot_tile<r, c>: the full tile and every edge tile.
template <int... I>
constexpr auto make_table(std::integer_sequence<int, I...>) {
  return std::array<DotTileFn, sizeof...(I)>{dot_tile<I / kCols + 1, I % kCols + 1>...};
}
constexpr auto kTable = make_table(std::make_integer_sequence<int, kRows * kCols>());

}  // namespace

void round_rows_to_bf16(const float* a, int64_t lda, int64_t m, int64_t k, uint16_t* out,
                        int64_t ldo) {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t k0 = 0; k0 < ldo; k0 += kChunk) {
      const int64_t rem = std::clamp<int64_t>(k - k0, 0, kChunk);
      const auto mask = static_cast<__mmask16>((1u << rem) - 1);
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, a + r * lda + k0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ldo + k0),
                          reinterpret_cast<const __m256i&>(v));
    }
}

// A whole [m, n] block: the weight tile outer (its rows stay in L1 while the row tiles pass),
// rows cut into ceil(m / 6) tiles of nearly equal height (gemm_f32_simd_tile.h's tile_block).
void tile_bf16(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
               int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  const int64_t row_tiles = (m + kRows - 1) / kRows;
  for (int64_t j = 0; j < n; j += kCols) {
    const int64_t cols = std::min<int64_t>(kCols, n - j);
    for (int64_t t = 0; t < row_tiles; ++t) {
      const int64_t i = m * t / row_tiles, rows = m * (t + 1) / row_tiles - i;
      kTable[static_cast<size_t>((rows - 1) * kCols + cols - 1)](
          a + i * lda, lda, w + j * ldw, ldw, out + i * ldo + j, ldo, k, accumulate);
    }
  }
}

}  // namespace dllm::cpu::gemm_detail
