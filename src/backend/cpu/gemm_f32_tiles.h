// The per-ISA halves of gemm_f32 (gemm_f32.h states the arithmetic every one of them performs).
// A tile function computes a whole [m, n] block of the output, looping over its own register
// tiles; gemm_f32.cpp cuts the product into such blocks for the caches and the threads. There is
// one tile function per weight dtype (w points at fp32, bf16 or f16 values; ldw counts elements).
#pragma once

#include <cstdint>
#include <functional>

#include "core/dtype.h"

namespace dllm::cpu::gemm_detail {

using TileFn = void (*)(const float* a, int64_t lda, const void* w, int64_t ldw, float* out,
                        int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);

// One of a kernel's tile functions by weight dtype.
inline TileFn tile_for(DType w_dtype, TileFn f32, TileFn bf16, TileFn f16) {
  switch (w_dtype) {
    case DType::kBF16:
      return bf16;
    case DType::kF16:
      return f16;
    case DType::kF32:
      break;
  }
  return f32;
}

// Cuts an [m, n] output with reduction length k into cache-sized blocks of at most
// cols_per_block columns and calls block(first_row, first_col, rows, cols) for each, on the
// threads when the product is large (gemm_f32.cpp). Every block is a whole piece of the output
// with the full k reduction.
using BlockFn = std::function<void(int64_t, int64_t, int64_t, int64_t)>;
constexpr int64_t kBlockCols = 64;  // gemm_f32.cpp says why
void for_each_block(int64_t m, int64_t n, int64_t k, const BlockFn& block,
                    int64_t cols_per_block = kBlockCols);

// std::fma only: any x86-64 (or other) CPU. gemm_f32_portable.cpp.
TileFn tile_portable(DType w_dtype);

// AVX2 + FMA (+ F16C) intrinsics; call only on a CPU that has them. gemm_f32_avx2.cpp.
TileFn tile_avx2(DType w_dtype);

// The same 256-bit arithmetic with AVX-512VL's 32 registers; call only on a CPU with AVX-512F,
// AVX-512VL, FMA and F16C. gemm_f32_avx512.cpp.
TileFn tile_avx512(DType w_dtype);

// The same lanes two output elements at a time in 512-bit registers; the same CPU features.
// gemm_f32_avx512_wide.cpp.
TileFn tile_avx512_wide(DType w_dtype);

}  // namespace dllm::cpu::gemm_detail
