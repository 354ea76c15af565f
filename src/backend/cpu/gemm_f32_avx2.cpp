// AVX2 + FMA kernel of gemm_f32 (this file alone is compiled with -mavx2 -mfma -mf16c;
// CMakeLists.txt). 3 × 4 tile: 12 accumulators + 3 a vectors + 1 w vector fill the 16 ymm
// registers.
#include "backend/cpu/gemm_f32_simd_tile.h"
#include "backend/cpu/gemm_f32_tiles.h"

namespace dllm::cpu::gemm_detail {
namespace {

template <class W>
void tile(const float* a, int64_t lda, const void* w, int64_t ldw, float* out, int64_t ldo,
          int64_t m, int64_t n, int64_t k, bool accumulate) {
  tile_block<3, 4, W>(a, lda, w, ldw, out, ldo, m, n, k, accumulate);
}

}  // namespace

TileFn tile_avx2(DType w_dtype) {
  switch (w_dtype) {
    case DType::kBF16:
      return tile<WeightBf16>;
    case DType::kF16:
      return tile<WeightF16>;
    case DType::kF32:
      break;
  }
  return tile<WeightF32>;
}

}  // namespace dllm::cpu::gemm_detail
