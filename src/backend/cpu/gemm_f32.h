// Batch-invariant fp32 GEMM of the CPU forward: out[m, n] = a[m, k] · w[n, k]ᵀ (+ out).
//
// Serving concatenates many requests' rows into one GEMM, and a request must decode the same ids
// alone or batched. OpenBLAS picks its code path and blocking by the shape, so a row's bits
// depend on how many rows share the call. Here every output element is one fixed sequence of float
// operations, whatever m, the row's position, the tiling or the thread count:
//
//   1. eight partial sums p[l] start at +0; for k0 = 0, 8, 16, ... (ascending)
//        p[l] = fma(a[k0 + l], w[k0 + l], p[l])      l = 0..7,
//      the last chunk padded with zeros when k is not a multiple of 8 (fma(0, 0, p) included);
//   2. s = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7));
//   3. out = accumulate ? out + s : s.
//
// The SIMD kernels and the portable std::fma kernel all perform exactly this, so they agree to
// the bit (tests/backend/gemm_f32_test.cpp checks it, and the invariance itself).
//
// w may also be bf16 or f16 (a checkpoint's weights where they lie, never copied): each value is
// widened to fp32 as it is loaded, which is exact, so the product has the bits of the fp32 product
// over the widened weights (tests/backend/gemm_weights_test.cpp), at half the bytes streamed.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace dllm::cpu {

// The kernels, slowest first. All of them give the same bits; they differ in speed and in the
// instruction sets they need.
enum class GemmKernel {
  kPortable,  // std::fma, any CPU: the reference the SIMD kernels must match bit for bit
  kAvx2,      // AVX2 + FMA, 3 × 4 register tiles (4 × 3 over bf16 / f16 weights)
  kAvx512,    // AVX-512VL's 32 ymm registers: 6 × 4 tiles up to k = 819 (same 256-bit arithmetic)
  // The same lanes two elements at a time in 512-bit registers: 6 × 8 tiles (twice the
  // multiply-adds per instruction where the FMA units are 512 bits wide).
  kAvx512Wide,
};

// Row-major; lda/ldw/ldo are row strides. Runs the fastest kernel this CPU has.
void gemm_nt_f32(const float* a, int64_t lda, const float* w, int64_t ldw, float* out, int64_t ldo,
                 int64_t m, int64_t n, int64_t k, bool accumulate);

// The same product on a chosen kernel (tests and benchmarks compare them); it must be available.
void gemm_nt_f32_on(GemmKernel kernel, const float* a, int64_t lda, const float* w, int64_t ldw,
                    float* out, int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);

// The same products with w in `w_dtype` (ldw in elements of that dtype).
void gemm_nt(const float* a, int64_t lda, DType w_dtype, const void* w, int64_t ldw, float* out,
             int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);
void gemm_nt_on(GemmKernel kernel, const float* a, int64_t lda, DType w_dtype, const void* w,
                int64_t ldw, float* out, int64_t ldo, int64_t m, int64_t n, int64_t k,
                bool accumulate);

bool gemm_kernel_available(GemmKernel kernel);
GemmKernel gemm_best_kernel();
const char* gemm_kernel_name(GemmKernel kernel);  // "portable", "avx2", "avx512", "avx512-wide"

}  // namespace dllm::cpu
