// The CPU forward's GEMM over bf16 weights on Intel AMX tiles (issue 25): out[m, n] = a[m, k] ·
// w[n, k]ᵀ (+ out) with fp32 activations, at fp32 accuracy.
//
// Why: a step of full diffusion multiplies hundreds of rows by every weight, and on two cores the
// exact fp32 FMA kernels (gemm_f32.h) are bound by their multiply-adds (~200 GFLOP/s), not by the
// weights' bytes. An AMX tile multiply-add (TDPBF16PS) performs 16 × 16 × 32 bf16 products at
// once. The weights are bf16 already (exact as tile operands, never converted); each
// activation is split into three bf16 parts, hi = bf16(x), mid = bf16(x − hi), lo = bf16(x − hi −
// mid), whose sum is x (each difference is exact in fp32, and three 8-bit significands cover
// x's 24), so every product w · x is formed exactly, as three exact bf16 products. What differs
// from gemm_f32 is only the order of the fp32 additions, hence not its bits: results agree with it
// to fp32 rounding (tests/backend/gemm_amx_test.cpp bounds the difference against a
// double-precision product), and the parity and trajectory tests hold on either path.
//
// Batch invariant, like gemm_f32: each output element is one fixed sequence of operations whatever
// m, its row's position or the threads — the tile unit forms element (n, r) from weight row n and
// activation row r alone, chunk after chunk of 32 k values in ascending order (k zero-padded to a
// whole chunk), the parts hi, mid, lo in that order within a chunk; out = accumulate ? out + s : s.
//
// Used by matmul_nt for bf16 weight matrices that amx_pays_off() under the default
// `--cpu-matmul` where the CPU has AMX-BF16 and the kernel grants the tile state (arch_prctl);
// `--cpu-matmul fp32` keeps the FMA kernels for all.
#pragma once

#include <cstdint>

namespace dllm::cpu {

// True when this CPU has AMX-TILE and AMX-BF16 and the kernel let this process use them.
bool gemm_amx_available();

// Which [n, k] bf16 weight matrices go to the tiles: at least `weights` values and k >= `min_k`.
// The split of the activations into tiles and the tiles' transposed stores cost per call;
// smaller products (the embedded tiny models: 256-wide) ran 30 % slower a step than on the FMA
// kernels. A property of the matrix alone, never of the row count: a row's bits never depend on
// its batch. Measured on a 2-core Xeon VM (docs/benchmarks.md, 2026-12-01): from 8 rows up the
// tiles are as fast or faster (2.5x at 512 rows); at 4 rows a weight-streaming product runs
// 1.2-1.6x slower.
struct AmxThreshold {
  int64_t weights = int64_t{1} << 20;
  int64_t min_k = 512;
};
// Process-wide, like the precision: tests set {0, 0} to run the tiny fixtures' matrices on tiles.
void set_amx_threshold(AmxThreshold threshold);
AmxThreshold amx_threshold();
bool amx_pays_off(int64_t n, int64_t k);

// The product above; w is bf16 (raw uint16 bits), ldw in elements. Needs gemm_amx_available().
void gemm_nt_amx(const float* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                 int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);

}  // namespace dllm::cpu
