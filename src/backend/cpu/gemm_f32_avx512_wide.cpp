// The 512-bit kernel of gemm_f32 (compiled with -mavx512f -mavx512vl -mfma -mf16c; CMakeLists.txt):
// the same per-element arithmetic as the 256-bit kernels (gemm_f32.h), two output elements per
// instruction. A zmm accumulator holds the eight partial sums of element (i, j) in its low half
// and those of (i, j + 1) in its high half; the activations' eight values are broadcast to both
// halves and the two weight rows' eight values fill one half each, so every lane performs exactly
// the fma of its element's lane in the 256-bit kernels, and the halves reduce as they do. Where the
// FMA units are 512 bits wide (Zen 5, Intel's server cores) that doubles the multiply-adds per
// instruction of a step that many rows make compute-bound.
#include "backend/cpu/gemm_f32_simd_tile.h"
#include "backend/cpu/gemm_f32_tiles.h"

namespace dllm::cpu::gemm_detail {
namespace {

// The two 256-bit halves as one register (vinsertf64x4: AVX-512F).
inline __m512 join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
inline __m256 high_half(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}
// Eight activations in both halves.
inline __m512 both_halves(__m256 a) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(a)));
}

// Eight weights of row p in the low half and of row q in the high half, widened to fp32 as
// WeightF32 / WeightBf16 / WeightF16 widen them (one 512-bit widening for both rows).
template <class W>
inline __m512 load_pair(const typename W::T* p, const typename W::T* q);
template <>
inline __m512 load_pair<WeightF32>(const float* p, const float* q) {
  return join(_mm256_loadu_ps(p), _mm256_loadu_ps(q));
}
inline __m256i two_rows_of_halves(const uint16_t* p, const uint16_t* q) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), 1);
}
template <>
inline __m512 load_pair<WeightBf16>(const uint16_t* p, const uint16_t* q) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(two_rows_of_halves(p, q)), 16));
}
template <>
inline __m512 load_pair<WeightF16>(const uint16_t* p, const uint16_t* q) {
  return _mm512_cvtph_ps(two_rows_of_halves(p, q));
}

// One k chunk of an R × C tile (P = ceil(C / 2) column pairs): the pairs' weights are loaded once,
// then each row's activations meet them. `load_pair(row, next row)` reads 8 weights of each,
// widened to fp32; an odd tile's missing last column is zeros (its half is never stored).
template <int R, int C, class WT, class LoadA, class LoadPair, class LoadW>
inline void wide_chunk_fma(__m512 (&acc)[R][(C + 1) / 2], const float* a, int64_t lda, const WT* w,
                           int64_t ldw, LoadA load_a, LoadPair load_pair, LoadW load_w) {
  constexpr int P = (C + 1) / 2;
  __m512 wv[P];
  for (int p = 0; p < P; ++p)
    wv[p] = 2 * p + 1 < C ? load_pair(w + 2 * p * ldw, w + (2 * p + 1) * ldw)
                          : join(load_w(w + 2 * p * ldw), _mm256_setzero_ps());
  for (int r = 0; r < R; ++r) {
    const __m512 av = both_halves(load_a(a + r * lda));
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(av, wv[p], acc[r][p]);
  }
}

// Accumulator of column c of a tile row (pair c / 2, half c % 2), or zeros past its C columns.
template <int c, int C>
inline __m256 wide_column(const __m512 (&row)[(C + 1) / 2]) {
  if constexpr (c >= C)
    return _mm256_setzero_ps();
  else if constexpr (c % 2 == 0)
    return _mm512_castps512_ps256(row[c / 2]);
  else
    return high_half(row[c / 2]);
}

// An R × C output tile (C <= 8) over weights of kind W, as micro_tile of gemm_f32_simd_tile.h.
template <int R, int C, class W>
__attribute__((always_inline)) inline void wide_micro_tile(const float* a, int64_t lda,
                                                           const void* w_bytes, int64_t ldw,
                                                           float* out, int64_t ldo, int64_t k,
                                                           bool accumulate) {
  using WT = typename W::T;
  constexpr int P = (C + 1) / 2;
  const WT* w = static_cast<const WT*>(w_bytes);
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for_each_k_chunk<C>(
      w, ldw, k,
      [&](int64_t k0) {
        wide_chunk_fma<R, C>(
            acc, a + k0, lda, w + k0, ldw, [](const float* p) { return _mm256_loadu_ps(p); },
            [](const WT* p, const WT* q) { return load_pair<W>(p, q); },
            [](const WT* p) { return W::load(p); });
      },
      [&](int64_t k0, int64_t rem) {
        const __m256i mask = tail_mask(rem);
        wide_chunk_fma<R, C>(
            acc, a + k0, lda, w + k0, ldw,
            [mask](const float* p) { return _mm256_maskload_ps(p, mask); },
            [rem](const WT* p, const WT* q) {
              return join(W::load_tail(p, rem), W::load_tail(q, rem));
            },
            [rem](const WT* p) { return W::load_tail(p, rem); });
      });
  static_assert(C <= 8, "two reduce4 per row");
  for (int r = 0; r < R; ++r) {
    store_sums(out + r * ldo,
               reduce4(wide_column<0, C>(acc[r]), wide_column<1, C>(acc[r]),
                       wide_column<2, C>(acc[r]), wide_column<3, C>(acc[r])),
               C < 4 ? C : 4, accumulate);
    if constexpr (C > 4)
      store_sums(out + r * ldo + 4,
                 reduce4(wide_column<4, C>(acc[r]), wide_column<5, C>(acc[r]),
                         wide_column<6, C>(acc[r]), wide_column<7, C>(acc[r])),
                 C - 4, accumulate);
  }
}

template <int R, int C, class W>
struct WideTile {
  __attribute__((always_inline)) static void run(const float* a, int64_t lda, const void* w,
                                                 int64_t ldw, float* out, int64_t ldo, int64_t k,
                                                 bool accumulate) {
    wide_micro_tile<R, C, W>(a, lda, w, ldw, out, ldo, k, accumulate);
  }
};

// 6 rows × 8 columns: 24 accumulators, 4 weight pairs, 1 activation register. Unlike the
// 256-bit kernel's 6 × 4 tile this one stays the faster past L1 too (Zen 5, one thread, Qwen3-0.6B
// down projection, k = 3072, bf16 weights: 6 × 8 at 165 / 194 / 199 GFLOP/s for 8 / 32 / 512 rows
// against 131 / 136 / 135 with 3 × 8 beyond 32 KB; fp32 weights 91-100 against 78-85).
template <class W>
void tile(const float* a, int64_t lda, const void* w, int64_t ldw, float* out, int64_t ldo,
          int64_t m, int64_t n, int64_t k, bool accumulate) {
  tile_block<6, 8, W, WideTile>(a, lda, w, ldw, out, ldo, m, n, k, accumulate);
}

}  // namespace

TileFn tile_avx512_wide(DType w_dtype) {
  return tile_for(w_dtype, tile<WeightF32>, tile<WeightBf16>, tile<WeightF16>);
}

}  // namespace dllm::cpu::gemm_detail
