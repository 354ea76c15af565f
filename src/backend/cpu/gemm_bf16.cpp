// Driver of the opt-in bf16 GEMM (gemm_bf16.h): rounds the activation rows to bf16 once per call,
// then runs the AVX512-BF16 tile kernel over gemm_f32's cache blocks and threads.
#include "backend/cpu/gemm_bf16.h"

#include <vector>

#include "backend/cpu/gemm_f32.h"
#include "backend/cpu/gemm_f32_tiles.h"

namespace dllm::cpu {
namespace gemm_detail {
// gemm_bf16_avx512.cpp (compiled for AVX512-BF16).
void round_rows_to_bf16(const float* a, int64_t lda, int64_t m, int64_t k, uint16_t* out,
                        int64_t ldo);
void tile_bf16(bool wide, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw,
               float* out, int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);
}  // namespace gemm_detail

namespace {

constexpr int64_t kChunk = 16;  // bf16 values per dot-product vector

}  // namespace

bool gemm_bf16_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
  return ok;
}

void gemm_nt_bf16(const float* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                  int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  // The fp32 GEMM's choice of vector width (gemm_best_kernel(): DLLM_CPU_GEMM_KERNEL=avx512 asks
  // for the 256-bit tiles, as it does there).
  static const bool wide = gemm_best_kernel() == GemmKernel::kAvx512Wide;
  gemm_nt_bf16_on(wide, a, lda, w, ldw, out, ldo, m, n, k, accumulate);
}

void gemm_nt_bf16_on(bool wide_tiles, const float* a, int64_t lda, const uint16_t* w, int64_t ldw,
                     float* out, int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  // Step 1 of gemm_bf16.h: each row rounded once, zero-padded to whole 16-value chunks (the
  // kernel then never masks activations). Per thread: calls run one at a time per thread.
  const int64_t ld = (k + kChunk - 1) / kChunk * kChunk;
  thread_local std::vector<uint16_t> rounded;
  rounded.resize(static_cast<size_t>(m * ld));
  gemm_detail::round_rows_to_bf16(a, lda, m, k, rounded.data(), ld);
  const uint16_t* ab = rounded.data();
  gemm_detail::for_each_block(m, n, k, [&](int64_t i, int64_t j, int64_t rows, int64_t cols) {
    gemm_detail::tile_bf16(wide_tiles, ab + i * ld, ld, w + j * ldw, ldw, out + i * ldo + j, ldo,
                           rows, cols, k, accumulate);
  });
}

}  // namespace dllm::cpu
