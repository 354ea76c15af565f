// Portable kernel of gemm_f32: the arithmetic of gemm_f32.h written out with std::fma, one
// output element at a time. It is the definition the SIMD kernels are tested against, so it stays
// literal: eight partial sums, zero-padded last chunk, the fixed addition tree. bf16 / f16 weights
// are widened to fp32 one value at a time (core/dtype.h), exactly as the load step converts them.
#include <cmath>
#include <cstring>

#include "backend/cpu/gemm_f32_tiles.h"

namespace dllm::cpu::gemm_detail {
namespace {

constexpr int kLanes = 8;

// Weight i of a row in fp32. memcpy: mapped checkpoint bytes need not be aligned.
template <DType D>
float weight_at(const unsigned char* row, int64_t i) {
  if constexpr (D == DType::kF32) {
    float f;
    std::memcpy(&f, row + 4 * i, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return D == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

// Steps 1 and 2 of gemm_f32.h for one (row, column) pair.
template <DType D>
float dot_fixed_order(const float* a, const unsigned char* w, int64_t k) {
  float p[kLanes] = {};
  int64_t k0 = 0;
  for (; k0 + kLanes <= k; k0 += kLanes)
    for (int l = 0; l < kLanes; ++l) p[l] = std::fma(a[k0 + l], weight_at<D>(w, k0 + l), p[l]);
  if (k0 < k) {
    // The SIMD kernels load the tail with zeros in the missing lanes and still multiply-add them.
    for (int l = 0; l < kLanes; ++l) {
      const bool in = k0 + l < k;
      p[l] = std::fma(in ? a[k0 + l] : 0.0f, in ? weight_at<D>(w, k0 + l) : 0.0f, p[l]);
    }
  }
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

template <DType D>
void tile(const float* a, int64_t lda, const void* w, int64_t ldw, float* out, int64_t ldo,
          int64_t m, int64_t n, int64_t k, bool accumulate) {
  const auto* wb = static_cast<const unsigned char*>(w);
  const int64_t row_bytes = ldw * static_cast<int64_t>(dtype_size(D));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float s = dot_fixed_order<D>(a + i * lda, wb + j * row_bytes, k);
      float& o = out[i * ldo + j];
      o = accumulate ? o + s : s;
    }
}

}  // namespace

TileFn tile_portable(DType w_dtype) {
  return tile_for(w_dtype, tile<DType::kF32>, tile<DType::kBF16>, tile<DType::kF16>);
}

}  // namespace dllm::cpu::gemm_detail
