// Register-tile kernel of gemm_f32 in 256-bit intrinsics, shared by the AVX2 and the AVX-512 build
// (gemm_f32_avx2.cpp, gemm_f32_avx512.cpp). Include it only from a file compiled for AVX2 + FMA;
// everything here has internal linkage so the two builds never merge at link time.
//
// Register tile: R rows of a × C rows of w, one 8-lane accumulator per output element, so lane l
// of element (i, j) is partial sum p[l] of gemm_f32.h and the k loop is its fixed ascending
// chunk loop. W is read in place (no packing): for few rows every weight byte streams through
// once, for many rows a w tile stays in cache while the row tiles pass over it. The AVX-512
// build only has more registers (32 instead of 16) for a larger tile; the arithmetic per element
// is the same instructions. Weights are read in their storage dtype (fp32, bf16, f16) and widened
// to fp32 in registers as they are loaded, so bf16/f16 checkpoints are streamed at half the bytes
// and never copied.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

namespace dllm::cpu::gemm_detail {
namespace {

// Lanes [0, rem) set: the zero-padded last chunk of gemm_f32.h step 1 (masked-off lanes read 0
// and never touch memory past the row).
inline __m256i tail_mask(int64_t rem) {
  alignas(32) static const int32_t kBits[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kBits + 8 - rem));
}

// Step 2 of gemm_f32.h for four accumulators at once: lane c of the result is
// ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) of v[c]. hadd adds neighbours within each
// 128-bit half; the last add joins the halves.
inline __m128 reduce4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Step 3: out = out + s or out = s for the first n (1..4) lanes of s.
inline void store_sums(float* out, __m128 s, int n, bool accumulate) {
  if (n == 4) {
    _mm_storeu_ps(out, accumulate ? _mm_add_ps(_mm_loadu_ps(out), s) : s);
    return;
  }
  alignas(16) float v[4];
  _mm_store_ps(v, s);
  for (int c = 0; c < n; ++c) out[c] = accumulate ? out[c] + v[c] : v[c];
}

// How a kernel reads one weight dtype: 8 consecutive values widened to fp32 in a register. bf16
// and f16 widen exactly (bf16 is the top half of an fp32; every f16 is an fp32), so a product over
// bf16/f16 weights has the bits of the same product over their fp32 copies (gemm_f32.h).
struct WeightF32 {
  using T = float;
  static __m256 load(const T* p) { return _mm256_loadu_ps(p); }
  static __m256 load_tail(const T* p, int64_t rem) { return _mm256_maskload_ps(p, tail_mask(rem)); }
};
struct WeightBf16 {
  using T = uint16_t;
  static __m256 widen(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static __m256 load(const T* p) {
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // The zero-padded last chunk: lanes past the row read +0 (bf16 0x0000), never memory past it.
  static __m256 load_tail(const T* p, int64_t rem) {
    alignas(16) T v[8] = {};
    std::memcpy(v, p, static_cast<size_t>(rem) * sizeof(T));
    return widen(_mm_load_si128(reinterpret_cast<const __m128i*>(v)));
  }
};
struct WeightF16 {
  using T = uint16_t;
  static __m256 load(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m256 load_tail(const T* p, int64_t rem) {
    alignas(16) T v[8] = {};
    std::memcpy(v, p, static_cast<size_t>(rem) * sizeof(T));
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(v)));
  }
};

// One k chunk of an R × C tile: the vectors of the smaller side are loaded once and kept in
// registers, those of the other side one at a time (R·C + min(R, C) + 1 registers). `load_a`
// reads 8 fp32 activations, `load_w` 8 weights widened to fp32.
template <int R, int C, class WT, class LoadA, class LoadW>
inline void chunk_fma(__m256 (&acc)[R][C], const float* a, int64_t lda, const WT* w, int64_t ldw,
                      LoadA load_a, LoadW load_w) {
  if constexpr (R <= C) {
    __m256 av[R];
    for (int r = 0; r < R; ++r) av[r] = load_a(a + r * lda);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = load_w(w + c * ldw);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(av[r], wv, acc[r][c]);
    }
  } else {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = load_w(w + c * ldw);
    for (int r = 0; r < R; ++r) {
      const __m256 av = load_a(a + r * lda);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(av, wv[c], acc[r][c]);
    }
  }
}

// Accumulator c of a tile row, or zeros past its C columns.
template <int c, int C>
inline __m256 column(const __m256 (&row)[C]) {
  if constexpr (c < C)
    return row[c];
  else
    return _mm256_setzero_ps();
}

// The k loop of a tile over C weight rows: full(k0) for each whole chunk of 8 (ascending), then
// tail(k0, rem) for the zero-padded last one. The C weight rows of a tile are short streams
// (2-4 KB); the hardware prefetcher barely ramps up on one before it ends. So each row also
// prefetches, one cache line per line it consumes, the same line of the tile C rows further on
// (the next tile of tile_block's column loop): a few-row step streams its weights at the
// memory's rate instead of its latency.
template <int C, class WT, class Full, class Tail>
__attribute__((always_inline)) inline void for_each_k_chunk(const WT* w, int64_t ldw, int64_t k,
                                                            Full full, Tail tail) {
  constexpr int64_t kLineElems = 64 / sizeof(WT);
  int64_t k0 = 0;
  for (; k0 + 8 <= k; k0 += 8) {
    if (k0 % kLineElems == 0)
      for (int c = 0; c < C; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(w + (c + C) * ldw + k0), _MM_HINT_T0);
    full(k0);
  }
  if (k0 < k) tail(k0, k - k0);
}

// An R × C output tile over weights of kind W (WeightF32 / WeightBf16 / WeightF16).
template <int R, int C, class W>
__attribute__((always_inline)) inline void micro_tile(const float* a, int64_t lda,
                                                      const void* w_bytes, int64_t ldw, float* out,
                                                      int64_t ldo, int64_t k, bool accumulate) {
  using WT = typename W::T;
  const WT* w = static_cast<const WT*>(w_bytes);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for_each_k_chunk<C>(
      w, ldw, k,
      [&](int64_t k0) {
        chunk_fma<R, C>(
            acc, a + k0, lda, w + k0, ldw, [](const float* p) { return _mm256_loadu_ps(p); },
            [](const WT* p) { return W::load(p); });
      },
      [&](int64_t k0, int64_t rem) {
        const __m256i mask = tail_mask(rem);
        chunk_fma<R, C>(
            acc, a + k0, lda, w + k0, ldw,
            [mask](const float* p) { return _mm256_maskload_ps(p, mask); },
            [rem](const WT* p) { return W::load_tail(p, rem); });
      });
  // Straight from the accumulators (columns past C reduce zeros and are not stored): copying them
  // into a padded array first made the compiler keep the whole tile on the stack, and a k = 64
  // attention product ran 25 % slower.
  static_assert(C <= 4, "one reduce4 per row");
  for (int r = 0; r < R; ++r)
    store_sums(out + r * ldo,
               reduce4(column<0>(acc[r]), column<1>(acc[r]), column<2>(acc[r]), column<3>(acc[r])),
               C, accumulate);
}

using MicroFn = void (*)(const float*, int64_t, const void*, int64_t, float*, int64_t, int64_t,
                         bool);

// The 256-bit micro tiles as a tile family (gemm_f32_avx512_wide.cpp has a 512-bit one).
template <int R, int C, class W>
struct YmmTile {
  __attribute__((always_inline)) static void run(const float* a, int64_t lda, const void* w,
                                                 int64_t ldw, float* out, int64_t ldo, int64_t k,
                                                 bool accumulate) {
    micro_tile<R, C, W>(a, lda, w, ldw, out, ldo, k, accumulate);
  }
};

// table[r - 1][c - 1] = Tile<r, c, W>::run: the full tile and every edge tile of a block.
template <int R, int C, class W, template <int, int, class> class Tile>
struct MicroTable {
  MicroFn fn[R][C];
  constexpr MicroTable() : fn() { fill<1>(); }
  template <int r>
  constexpr void fill() {
    fill_row<r>(std::make_integer_sequence<int, C>());
    if constexpr (r < R) fill<r + 1>();
  }
  template <int r, int... c>
  constexpr void fill_row(std::integer_sequence<int, c...>) {
    ((fn[r - 1][c] = Tile<r, c + 1, W>::run), ...);
  }
};

// A whole [m, n] block with R × C tiles of the family Tile. The w tile is the outer loop: its C
// rows stay in L1 while every row tile of the block passes over them. The m rows are cut into
// ceil(m / R) row tiles of nearly equal height (32 rows with R = 6: 5,5,6,5,5,6 rather than
// 6,6,6,6,6,2): a thin edge tile loads and widens its weights for too few rows (the 2-row tile
// took 6 % of a 32-row step of the embedded model). The tiling never changes an element's
// arithmetic.
template <int R, int C, class W, template <int, int, class> class Tile = YmmTile>
void tile_block(const float* a, int64_t lda, const void* w_bytes, int64_t ldw, float* out,
                int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  static constexpr MicroTable<R, C, W, Tile> kTable;
  const auto* w = static_cast<const typename W::T*>(w_bytes);
  const int64_t row_tiles = (m + R - 1) / R;
  for (int64_t j = 0; j < n; j += C) {
    const int64_t cols = std::min<int64_t>(C, n - j);
    for (int64_t t = 0; t < row_tiles; ++t) {
      const int64_t i = m * t / row_tiles, rows = m * (t + 1) / row_tiles - i;
      // The full tile inline (no call, no spills around it: short k, as attention's k = 64,
      // pays for those per tile); edge tiles through the table.
      if (rows == R && cols == C)
        Tile<R, C, W>::run(a + i * lda, lda, w + j * ldw, ldw, out + i * ldo + j, ldo, k,
                           accumulate);
      else
        kTable.fn[rows - 1][cols - 1](a + i * lda, lda, w + j * ldw, ldw, out + i * ldo + j, ldo, k,
                                      accumulate);
    }
  }
}

}  // namespace
}  // namespace dllm::cpu::gemm_detail
