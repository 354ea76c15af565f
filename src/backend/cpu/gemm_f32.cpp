// Driver of gemm_f32: picks the kernel, cuts the product into cache-sized blocks and shares the
// blocks among the threads (core/thread_pool.h). Every block is a whole [rows, columns] piece of
// the output with the full k reduction, so neither the cut nor the thread count changes any
// element's arithmetic (gemm_f32.h).
#include "backend/cpu/gemm_f32.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/gemm_f32_tiles.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace dllm::cpu {
namespace {

using gemm_detail::TileFn;

// Columns per block: a multiple of the kernel's register tile width. 64 rows of w of k = 1024
// are 256 KiB, which sit in L2 next to the a block while each w tile is in use. The AVX2 kernel's
// 4 × 3 tiles for 16-bit weights (gemm_f32_avx2.cpp) take 63: with 64 every block ended in a
// 4 × 1 tile, 1/64 of the columns at a quarter of the rate, 2 % of a 512-token LLaDA step.
using gemm_detail::kBlockCols;
constexpr int64_t kBlockColsAvx2Widened = 63;

int64_t block_cols(GemmKernel kernel, DType w_dtype) {
  return kernel == GemmKernel::kAvx2 && w_dtype != DType::kF32 ? kBlockColsAvx2Widened : kBlockCols;
}

// Rows of a per block: about 256 KiB of a, a multiple of the register tile heights (3, 4, 6).
constexpr int64_t kBlockBytes = 256 * 1024;
constexpr int64_t kRowMultiple = 12;
// Below this many multiply-adds (~10-20 us on one core) one thread is faster: waking the others
// costs more. 32 rows of a 256 x 256 projection (2M) gain from a second thread.
constexpr int64_t kParallelMacs = int64_t{1} << 20;

int64_t block_rows(int64_t k) {
  const int64_t rows = kBlockBytes / (std::max<int64_t>(k, 1) * int64_t{sizeof(float)});
  return std::max(kRowMultiple, rows / kRowMultiple * kRowMultiple);
}

TileFn tile_of(GemmKernel kernel, DType w_dtype) {
  switch (kernel) {
    case GemmKernel::kAvx512:
      return gemm_detail::tile_avx512(w_dtype);
    case GemmKernel::kAvx512Wide:
      return gemm_detail::tile_avx512_wide(w_dtype);
    case GemmKernel::kAvx2:
      return gemm_detail::tile_avx2(w_dtype);
    case GemmKernel::kPortable:
      break;
  }
  return gemm_detail::tile_portable(w_dtype);
}

void run_blocks(GemmKernel kernel, const float* a, int64_t lda, DType w_dtype, const void* w,
                int64_t ldw, float* out, int64_t ldo, int64_t m, int64_t n, int64_t k,
                bool accumulate) {
  const TileFn tile = tile_of(kernel, w_dtype);
  const auto* w_bytes = static_cast<const unsigned char*>(w);
  const int64_t row_bytes = ldw * static_cast<int64_t>(dtype_size(w_dtype));
  gemm_detail::for_each_block(
      m, n, k,
      [&](int64_t i, int64_t j, int64_t rows, int64_t cols) {
        tile(a + i * lda, lda, w_bytes + j * row_bytes, ldw, out + i * ldo + j, ldo, rows, cols, k,
             accumulate);
      },
      block_cols(kernel, w_dtype));
}

}  // namespace

namespace gemm_detail {

void for_each_block(int64_t m, int64_t n, int64_t k, const BlockFn& block, int64_t cols_per_block) {
  if (m <= 0 || n <= 0) return;
  const int64_t rows = block_rows(k);
  const int64_t col_blocks = (n + cols_per_block - 1) / cols_per_block;
  const int64_t row_blocks = (m + rows - 1) / rows;
  const bool parallel = m * n * k >= kParallelMacs && col_blocks * row_blocks > 1;
  // Column-block major: consecutive blocks of one thread share w rows, and a few-row product
  // (one row block) reads every weight once. Static contiguous chunks of the block list.
  const auto blocks = [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t i = (b % row_blocks) * rows, j = (b / row_blocks) * cols_per_block;
      block(i, j, std::min(rows, m - i), std::min(cols_per_block, n - j));
    }
  };
  if (parallel)
    parallel_for(col_blocks * row_blocks, blocks);
  else
    blocks(0, col_blocks * row_blocks);
}

}  // namespace gemm_detail

bool gemm_kernel_available(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kAvx512:
    case GemmKernel::kAvx512Wide:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case GemmKernel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case GemmKernel::kPortable:
      return true;
  }
  return false;
}

// The fastest kernel this CPU has: with AVX-512 the 512-bit one (Zen 5, one thread, Qwen3-0.6B
// projections over bf16 weights at 4-512 rows: 131-199 GFLOP/s against 111-127 for the 256-bit
// one, docs/benchmarks.md). DLLM_CPU_GEMM_KERNEL names another (comparisons; all give the same
// bits).
GemmKernel gemm_best_kernel() {
  static const GemmKernel best = [] {
    if (const char* name = std::getenv("DLLM_CPU_GEMM_KERNEL"); name && *name) {
      for (GemmKernel k :
           {GemmKernel::kPortable, GemmKernel::kAvx2, GemmKernel::kAvx512, GemmKernel::kAvx512Wide})
        if (std::strcmp(name, gemm_kernel_name(k)) == 0) {
          if (!gemm_kernel_available(k))
            fail("DLLM_CPU_GEMM_KERNEL=", name, ": this CPU lacks the instructions it needs");
          return k;
        }
      fail("DLLM_CPU_GEMM_KERNEL=", name,
           " is not a kernel (accepted: portable, avx2, avx512, avx512-wide)");
    }
    return gemm_kernel_available(GemmKernel::kAvx512Wide) ? GemmKernel::kAvx512Wide
           : gemm_kernel_available(GemmKernel::kAvx2)     ? GemmKernel::kAvx2
                                                          : GemmKernel::kPortable;
  }();
  return best;
}

const char* gemm_kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kAvx512:
      return "avx512";
    case GemmKernel::kAvx512Wide:
      return "avx512-wide";
    case GemmKernel::kAvx2:
      return "avx2";
    case GemmKernel::kPortable:
      break;
  }
  return "portable";
}

void gemm_nt_f32(const float* a, int64_t lda, const float* w, int64_t ldw, float* out, int64_t ldo,
                 int64_t m, int64_t n, int64_t k, bool accumulate) {
  gemm_nt(a, lda, DType::kF32, w, ldw, out, ldo, m, n, k, accumulate);
}

void gemm_nt_f32_on(GemmKernel kernel, const float* a, int64_t lda, const float* w, int64_t ldw,
                    float* out, int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  gemm_nt_on(kernel, a, lda, DType::kF32, w, ldw, out, ldo, m, n, k, accumulate);
}

void gemm_nt(const float* a, int64_t lda, DType w_dtype, const void* w, int64_t ldw, float* out,
             int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  gemm_nt_on(gemm_best_kernel(), a, lda, w_dtype, w, ldw, out, ldo, m, n, k, accumulate);
}

void gemm_nt_on(GemmKernel kernel, const float* a, int64_t lda, DType w_dtype, const void* w,
                int64_t ldw, float* out, int64_t ldo, int64_t m, int64_t n, int64_t k,
                bool accumulate) {
  run_blocks(kernel, a, lda, w_dtype, w, ldw, out, ldo, m, n, k, accumulate);
}

}  // namespace dllm::cpu
