// AVX2 + FMA kernel of gemm_f32 (this file alone is compiled with -mavx2 -mfma -mf16c;
// CMakeLists.txt). 12 accumulators + 3 vectors of one side + 1 of the other fill the 16 ymm
// registers: a 3 × 4 or a 4 × 3 tile (the same arithmetic per element either way).
#include "backend/cpu/gemm_f32_simd_tile.h"
#include "backend/cpu/gemm_f32_tiles.h"

namespace dllm::cpu::gemm_detail {
namespace {

// fp32 weights: 3 × 4 tiles (3 a vectors kept, 4 w loads per k chunk).
void tile_f32(const float* a, int64_t lda, const void* w, int64_t ldw, float* out, int64_t ldo,
              int64_t m, int64_t n, int64_t k, bool accumulate) {
  tile_block<3, 4, WeightF32>(a, lda, w, ldw, out, ldo, m, n, k, accumulate);
}

// bf16 / f16 weights: 4 × 3 tiles. The 3 widened w vectors stay in registers while 4 a rows pass,
// so a k chunk widens 3 weight vectors for 12 FMAs instead of 4 (the widening's shifts and
// shuffles share ports with the FMAs on Zen 3), and a 4-row block is one row tile instead of
// 2 + 2, which loaded and widened every weight twice. On a 2-core Zen 3 (AVX2 only), bf16 weights,
// one thread: 192 × 1024 × 1024 68 → 70-72 GFLOP/s, 640 × 2816 × 1024 64-66 → 70, 4 rows of
// 2816 × 1024 52-55 → 69-70 (docs/benchmarks.md, issue 25 on an AVX2 machine).
template <class W>
void tile_widened(const float* a, int64_t lda, const void* w, int64_t ldw, float* out, int64_t ldo,
                  int64_t m, int64_t n, int64_t k, bool accumulate) {
  tile_block<4, 3, W>(a, lda, w, ldw, out, ldo, m, n, k, accumulate);
}

}  // namespace

TileFn tile_avx2(DType w_dtype) {
  return tile_for(w_dtype, tile_f32, tile_widened<WeightBf16>, tile_widened<WeightF16>);
}

}  // namespace dllm::cpu::gemm_detail
