// Opt-in bf16 GEMM of the CPU forward (issue 25): out[m, n] = bf16(a)[m, k] · w[n, k]ᵀ (+ out) for
// bf16 weights, on AVX512-BF16 dot products (vdpbf16ps: two bf16 products per fp32 lane and
// instruction, twice the multiply-adds per cycle of the fp32 FMA kernel).
//
// Different numerics from gemm_f32.h, hence opt-in (`--cpu-matmul bf16`): each activation is
// rounded to bf16 (round to nearest even, as llama.cpp's bf16 path and torch's bf16 matmuls do),
// so results differ from the fp32 reference by up to ~2^-9 relative per product, and the exact
// fp32 parity / trajectory tests do not apply. Still batch invariant: every output element is one
// fixed sequence of operations whatever m, its row's position or the threads:
//
//   1. the row a is rounded to bf16 and zero-padded to a multiple of 16 values;
//   2. eight fp32 partial sums p[l] start at +0; for k0 = 0, 16, 32, ... (ascending)
//        p[l] = vdpbf16ps(p[l], a[k0 + 2l .. k0 + 2l + 1], w[k0 + 2l .. k0 + 2l + 1])   l = 0..7;
//   3. s = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)); out = accumulate ? out + s : s.
//
// tests/backend/gemm_bf16_test.cpp checks it against a double-precision product of the rounded
// activations and the weights, and the batch invariance.
#pragma once

#include <cstdint>

namespace dllm::cpu {

// True when this CPU has AVX-512 F / VL / BW and AVX512-BF16.
bool gemm_bf16_available();

// The product above; w is bf16 (raw uint16 bits), ldw in elements. Needs gemm_bf16_available().
// Runs 512-bit tiles (two output elements' partial sums a register) unless DLLM_CPU_GEMM_KERNEL
// asks for a 256-bit fp32 kernel (gemm_f32.h), then 256-bit ones: the same bits either way.
void gemm_nt_bf16(const float* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                  int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);
// The same on the chosen tiles (tests and benchmarks compare them).
void gemm_nt_bf16_on(bool wide_tiles, const float* a, int64_t lda, const uint16_t* w, int64_t ldw,
                     float* out, int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);

}  // namespace dllm::cpu
