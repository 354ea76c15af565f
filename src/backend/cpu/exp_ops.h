// The CPU forward's elementwise work whose cost is expf: the masked softmax of one attention row
// and SwiGLU's silu(gate) · up. Each has a portable kernel (std::exp) and AVX2 + FMA and AVX-512
// kernels that perform the same float operations in the same order, eight or sixteen values at a
// time, with glibc's expf bits (expf_avx2.h, expf_avx512.h) — so all give the same bits
// (tests/backend/exp_ops_test.cpp) and a forward's results do not depend on which one ran.
#pragma once

#include <cstdint>

namespace dllm::cpu {

// One attention row's masked softmax, in place:
//
//   s[j] *= scale;  mx = max of the visible s[j];
//   s[j] = visible ? exp(s[j] − mx) : 0 (std::exp in float);  sum = Σ s[j] in double, in order j;
//   s[j] *= (float)(1 / sum).
//
// A row that sees nothing becomes zeros and the call returns false. The AVX2 kernel takes the
// maximum eight lanes at a time (exact whatever the order) and keeps the sum one double
// accumulation in index order (its rounding depends on the order).
bool softmax_row(float* s, const uint8_t* visible, int64_t n, float scale);

// softmax_row on `rows` consecutive rows of n values (s and visible row-major); seen[r] receives
// each row's result (seen may be null). The AVX-512 kernel adds up four rows' sums side by side
// (each still one double accumulation in index order: the same bits), which one row's dependent
// additions bound.
void softmax_rows(float* s, const uint8_t* visible, int64_t n, int64_t rows, float scale,
                  bool* seen);

// out[i] = gate[i] / (1 + exp(−gate[i])) · up[i] over [first, last), in float.
void silu_mul_range(const float* gate, const float* up, float* out, int64_t first, int64_t last);

// Each kernel on its own (the tests compare them); the AVX2 ones need AVX2 + FMA, the AVX-512
// ones (sixteen values at a time: expf_avx512.h) AVX-512F too. The dispatch takes the widest.
bool exp_ops_avx2_available();
bool exp_ops_avx512_available();
bool softmax_row_portable(float* s, const uint8_t* visible, int64_t n, float scale);
bool softmax_row_avx2(float* s, const uint8_t* visible, int64_t n, float scale);
bool softmax_row_avx512(float* s, const uint8_t* visible, int64_t n, float scale);
void softmax_rows_avx512(float* s, const uint8_t* visible, int64_t n, int64_t rows, float scale,
                         bool* seen);
void silu_mul_portable(const float* gate, const float* up, float* out, int64_t first, int64_t last);
void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t first, int64_t last);
void silu_mul_avx512(const float* gate, const float* up, float* out, int64_t first, int64_t last);

// out[i] = expf(x[i]) by the AVX2 / AVX-512 kernels' exponential (glibc's bits), for its test.
void expf_avx2(const float* x, float* out, int64_t n);
void expf_avx512(const float* x, float* out, int64_t n);

}  // namespace dllm::cpu
