// AVX512-BF16 kernels of the opt-in bf16 GEMM (gemm_bf16.h states the arithmetic), compiled with
// -mavx512f -mavx512vl -mavx512bw -mavx512bf16 (CMakeLists.txt); call only where
// gemm_bf16_available(). Two tile kernels with the same bits, as gemm_f32's kAvx512 and
// kAvx512Wide: 256-bit vectors with AVX-512VL's 32 registers in 6 × 4 tiles (on Zen 4 a 512-bit
// vdpbf16ps is two 256-bit halves), and 512-bit ones in 6 × 8 tiles, each register holding the
// eight partial sums of two output elements — twice the dot products per instruction where the
// units are 512 bits wide (Zen 5, Intel's server cores).
#include "backend/cpu/avx512_intrinsics.h"

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

// An R × C output tile (dot_tile, not the fp32 header's micro_tile): rows of a (bf16, zero-padded
// to whole chunks) against C weight rows. The C weight vectors of a chunk are loaded once and kept;
// each row's vector is loaded once and meets all of them (R·C accumulators + C + 1 registers).
template <int R, int C>
void dot_tile(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
              int64_t ldo, int64_t k, bool accumulate) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const auto step = [&](const __m256i(&wv)[C], int64_t k0) {
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

inline __m512bh as_bh(__m512i v) {
  return reinterpret_cast<__m512bh&>(v);
}

// Chunk k0 of weight rows p (low half) and q (high half); a missing q (an odd tile's last
// column) is zeros. `load` reads one row's 16 values.
template <class Load>
inline __m512i weight_pair(const uint16_t* p, const uint16_t* q, Load load) {
  const __m256i hi = q ? load(q) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(load(p)), hi, 1);
}

// dot_tile with 512-bit registers: acc[r][c / 2] holds column c's eight partial sums in half
// c % 2; the row's 16 values are broadcast to both halves, so every lane performs the vdpbf16ps
// of its element's lane in dot_tile, and the halves reduce as dot_tile's registers do.
template <int R, int C>
void wide_dot_tile(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                   int64_t ldo, int64_t k, bool accumulate) {
  constexpr int P = (C + 1) / 2;
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const auto step = [&](const __m512i(&wv)[P], int64_t k0) {
    for (int r = 0; r < R; ++r) {
      const __m512bh av = as_bh(_mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + r * lda + k0))));
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], av, as_bh(wv[p]));
    }
  };
  const auto pair_rows = [&](int p, int64_t k0, auto load) {
    return weight_pair(w + 2 * p * ldw + k0, 2 * p + 1 < C ? w + (2 * p + 1) * ldw + k0 : nullptr,
                       load);
  };
  const auto full = [](const uint16_t* r) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r));
  };
  int64_t k0 = 0;
  for (; k0 + kChunk <= k; k0 += kChunk) {
    if (k0 % 32 == 0)  // as dot_tile: one line of the next tile's weight rows per line consumed
      for (int c = 0; c < C; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(w + (c + C) * ldw + k0), _MM_HINT_T0);
    __m512i wv[P];
    for (int p = 0; p < P; ++p) wv[p] = pair_rows(p, k0, full);
    step(wv, k0);
  }
  if (k0 < k) {  // the zero-padded last chunk, as in dot_tile
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - k0)) - 1);
    const auto masked = [mask](const uint16_t* r) { return _mm256_maskz_loadu_epi16(mask, r); };
    __m512i wv[P];
    for (int p = 0; p < P; ++p) wv[p] = pair_rows(p, k0, masked);
    step(wv, k0);
  }
  const auto column = [](const __m512(&row)[P], int c) {
    if (c >= C) return _mm256_setzero_ps();
    const __m512 v = row[c / 2];
    return c % 2 == 0 ? _mm512_castps512_ps256(v)
                      : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  };
  for (int r = 0; r < R; ++r) {
    store_sums(out + r * ldo,
               reduce4(column(acc[r], 0), column(acc[r], 1), column(acc[r], 2), column(acc[r], 3)),
               C < 4 ? C : 4, accumulate);
    if constexpr (C > 4)
      store_sums(
          out + r * ldo + 4,
          reduce4(column(acc[r], 4), column(acc[r], 5), column(acc[r], 6), column(acc[r], 7)),
          C - 4, accumulate);
  }
}

using DotTileFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t,
                           int64_t, bool);

// The tile shapes: rows × columns of the full tile (edge tiles are smaller instantiations).
template <bool WIDE>
struct Shape {
  static constexpr int kRows = 6, kCols = WIDE ? 8 : 4;
  template <int R, int C>
  static constexpr DotTileFn fn() {
    if constexpr (WIDE)
      return wide_dot_tile<R, C>;
    else
      return dot_tile<R, C>;
  }
};

// kTable<WIDE>[(r - 1) * kCols + c - 1] = the r × c tile: the full tile and every edge tile.
template <bool WIDE, int... I>
constexpr auto make_table(std::integer_sequence<int, I...>) {
  using S = Shape<WIDE>;
  return std::array<DotTileFn, sizeof...(I)>{
      S::template fn<I / S::kCols + 1, I % S::kCols + 1>()...};
}
template <bool WIDE>
constexpr auto kTable =
    make_table<WIDE>(std::make_integer_sequence<int, Shape<WIDE>::kRows * Shape<WIDE>::kCols>());

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

namespace {

// A whole [m, n] block: the weight tile outer (its rows stay in L1 while the row tiles pass),
// rows cut into ceil(m / 6) tiles of nearly equal height (gemm_f32_simd_tile.h's tile_block).
template <bool WIDE>
void tile_block(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  constexpr int kRows = Shape<WIDE>::kRows, kCols = Shape<WIDE>::kCols;
  const int64_t row_tiles = (m + kRows - 1) / kRows;
  for (int64_t j = 0; j < n; j += kCols) {
    const int64_t cols = std::min<int64_t>(kCols, n - j);
    for (int64_t t = 0; t < row_tiles; ++t) {
      const int64_t i = m * t / row_tiles, rows = m * (t + 1) / row_tiles - i;
      kTable<WIDE>[static_cast<size_t>((rows - 1) * kCols + cols - 1)](
          a + i * lda, lda, w + j * ldw, ldw, out + i * ldo + j, ldo, k, accumulate);
    }
  }
}

}  // namespace

void tile_bf16(bool wide, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw,
               float* out, int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  if (wide)
    tile_block<true>(a, lda, w, ldw, out, ldo, m, n, k, accumulate);
  else
    tile_block<false>(a, lda, w, ldw, out, ldo, m, n, k, accumulate);
}

}  // namespace dllm::cpu::gemm_detail
