// fp32 building blocks of the CPU forward. Each is checked against a naive reference in
// tests/backend/cpu_ops_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dllm::cpu {

// out[m, n] = a[m, k] · w[n, k]ᵀ (+ out when accumulate). Row-major; lda/ldw/ldo are row strides.
// Batch invariant: a row's bits do not depend on m, its position or the threads (gemm_f32.h).
void matmul_nt(const float* a, int64_t lda, const float* w, int64_t ldw, float* out, int64_t ldo,
               int64_t m, int64_t n, int64_t k, bool accumulate = false);

// RMSNorm over the last dimension of `rows` rows of width `dim` (row stride `stride`), in place
// allowed: out = x / sqrt(mean(x²) + eps) * weight.
void rms_norm(const float* x, int64_t x_stride, const float* weight, float* out, int64_t out_stride,
              int64_t rows, int64_t dim, float eps);

// Inverse frequencies of NeoX RoPE over `rotary_dim` dims, computed in fp32 as Hugging Face does.
std::vector<float> rope_inv_freq(double theta, int64_t rotary_dim);

// Applies NeoX (rotate-half) RoPE in place to `rows` rows of `heads` heads of `head_dim` each
// (row stride `stride`), rotating the first `rotary_dim` dims of every head; row r is at logical
// position positions[r]. Dims past rotary_dim pass through (partial rotary). cos and sin are
// multiplied by `scale` (YaRN's attention factor, model/rope.h; 1 otherwise).
void rope_neox(float* x, int64_t stride, int64_t rows, int64_t heads, int64_t head_dim,
               int64_t rotary_dim, std::span<const int32_t> positions,
               std::span<const float> inv_freq, float scale = 1.0f);

// out = silu(gate) * up, elementwise over n values.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// Attention of n_q query rows against n_k keys for every query head.
//   q:   [n_q, num_heads * head_dim]      (row stride q_stride)
//   k,v: key rows, k_rows[j] -> [num_kv_heads * head_dim] of key j
//   visible: [n_q, n_k], 1 = may attend
//   out: [n_q, num_heads * head_dim]     (row stride out_stride)
// A query that sees no key gets a zero output.
// head_mean_probs (optional, [n_q, n_k]): receives the post-softmax probabilities averaged over
// the query heads (d2Cache's attention rollout).
void attention(const float* q, int64_t q_stride, std::span<const float* const> k_rows,
               std::span<const float* const> v_rows, std::span<const uint8_t> visible, float* out,
               int64_t out_stride, int64_t n_q, int64_t num_heads, int64_t num_kv_heads,
               int64_t head_dim, float scale, float* head_mean_probs = nullptr);

}  // namespace dllm::cpu
