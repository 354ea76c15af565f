// AVX-512 kernel of gemm_f32 (compiled with -mavx512f -mavx512vl -mfma -mf16c; CMakeLists.txt). It
// runs the same 256-bit arithmetic as the AVX2 kernel; AVX-512VL only lends it 32 ymm registers,
// so a 6 × 4 tile (24 accumulators + 4 w vectors + 1 a vector) needs fewer loads per FMA.
#include "backend/cpu/gemm_f32_simd_tile.h"
#include "backend/cpu/gemm_f32_tiles.h"

namespace dllm::cpu::gemm_detail {
namespace {

// The 6 rows of a and 4 rows of w a 6 × 4 tile streams must fit in L1 (32 KiB on the machines we
// run) or the w tile is evicted before the next row tile reuses it; for longer rows the 3 × 4 tile
// is faster (measured on Zen 4 with fp32 weights at k = 1024: 86 against 72 GFLOP/s,
// docs/benchmarks.md). bf16 / f16 weight rows are half as long: at k = 1024 the 6 × 4 tile fits
// and runs at 94-100 GFLOP/s against 86 for 3 × 4 (docs/benchmarks.md, issue 25).
constexpr int64_t kL1Bytes = 32 * 1024;

// A block of at most 6 rows is one row tile: each w tile is used once, so the L1 concern above does
// not arise, and splitting 4 rows into 3 + 1 would load (and widen) every weight twice — a
// denoising step's 4-row GEMMs ran 1.5x slower that way (docs/benchmarks.md, issue 25).
template <class W>
void tile(const float* a, int64_t lda, const void* w, int64_t ldw, float* out, int64_t ldo,
          int64_t m, int64_t n, int64_t k, bool accumulate) {
  if (m <= 6 || k * (6 * int64_t{sizeof(float)} + 4 * int64_t{sizeof(typename W::T)}) <= kL1Bytes)
    tile_block<6, 4, W>(a, lda, w, ldw, out, ldo, m, n, k, accumulate);
  else
    tile_block<3, 4, W>(a, lda, w, ldw, out, ldo, m, n, k, accumulate);
}

}  // namespace

TileFn tile_avx512(DType w_dtype) {
  return tile_for(w_dtype, tile<WeightF32>, tile<WeightBf16>, tile<WeightF16>);
}

}  // namespace dllm::cpu::gemm_detail
