// The per-ISA halves of gemm_f32 (gemm_f32.h states the arithmetic every one of them performs).
// A tile function computes a whole [m, n] block of the output, looping over its own register
// tiles; gemm_f32.cpp cuts the product into such blocks for the caches and the threads.
#pragma once

#include <cstdint>

namespace dllm::cpu::gemm_detail {

using TileFn = void (*)(const float* a, int64_t lda, const float* w, int64_t ldw, float* out,
                        int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);

// std::fma only: any x86-64 (or other) CPU. gemm_f32_portable.cpp.
void tile_portable(const float* a, int64_t lda, const float* w, int64_t ldw, float* out,
                   int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);

// AVX2 + FMA intrinsics; call only on a CPU that has both. gemm_f32_avx2.cpp.
void tile_avx2(const float* a, int64_t lda, const float* w, int64_t ldw, float* out, int64_t ldo,
               int64_t m, int64_t n, int64_t k, bool accumulate);

// The same 256-bit arithmetic with AVX-512VL's 32 registers; call only on a CPU with AVX-512F,
// AVX-512VL and FMA. gemm_f32_avx512.cpp.
void tile_avx512(const float* a, int64_t lda, const float* w, int64_t ldw, float* out, int64_t ldo,
                 int64_t m, int64_t n, int64_t k, bool accumulate);

}  // namespace dllm::cpu::gemm_detail
