// Portable kernel of gemm_f32: the arithmetic of gemm_f32.h written out with std::fma, one
// output element at a time. It is the definition the SIMD kernels are tested against, so it stays
// literal: eight partial sums, zero-padded last chunk, the fixed addition tree.
#include <cmath>

#include "backend/cpu/gemm_f32_tiles.h"

namespace dllm::cpu::gemm_detail {
namespace {

constexpr int kLanes = 8;

// Steps 1 and 2 of gemm_f32.h for one (row, column) pair.
float dot_fixed_order(const float* a, const float* w, int64_t k) {
  float p[kLanes] = {};
  int64_t k0 = 0;
  for (; k0 + kLanes <= k; k0 += kLanes)
    for (int l = 0; l < kLanes; ++l) p[l] = std::fma(a[k0 + l], w[k0 + l], p[l]);
  if (k0 < k) {
    // The SIMD kernels load the tail with zeros in the missing lanes and still multiply-add them.
    for (int l = 0; l < kLanes; ++l) {
      const bool in = k0 + l < k;
      p[l] = std::fma(in ? a[k0 + l] : 0.0f, in ? w[k0 + l] : 0.0f, p[l]);
    }
  }
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

}  // namespace

void tile_portable(const float* a, int64_t lda, const float* w, int64_t ldw, float* out,
                   int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float s = dot_fixed_order(a + i * lda, w + j * ldw, k);
      float& o = out[i * ldo + j];
      o = accumulate ? o + s : s;
    }
}

}  // namespace dllm::cpu::gemm_detail
