// Checks every GEMM over bf16 weights owes its callers whatever its arithmetic (gemm_bf16_test,
// gemm_amx_test): a row's bits never depend on its batch, its position in it or the threads, and
// accumulate = true adds the product to what out held.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/thread_pool.h"
#include "support/bf16_gemm_problem.h"

namespace dllm::test {

// gemm_nt_bf16 / gemm_nt_amx: out[m, n] (+)= a[m, k] · w[n, k]ᵀ.
using Bf16Gemm = void (*)(const float* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                          int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate);

// Rows [first_row, first_row + rows) of p's product alone (rows < 0: all of them).
inline std::vector<float> run_rows(Bf16Gemm gemm, const Bf16GemmProblem& p, int64_t first_row = 0,
                                   int64_t rows = -1) {
  if (rows < 0) rows = p.m;
  std::vector<float> out(static_cast<size_t>(rows * p.n), -1.0f);
  gemm(p.a.data() + first_row * p.k, p.k, p.w.data(), p.k, out.data(), p.n, rows, p.n, p.k, false);
  return out;
}

// The whole product on 1 and 2 threads, and every slice [first, first + rows) alone, bit for bit.
inline void expect_rows_batch_and_thread_invariant(Bf16Gemm gemm, const Bf16GemmProblem& p,
                                                   std::initializer_list<int64_t> firsts,
                                                   std::initializer_list<int64_t> row_counts) {
  const int threads = num_threads();
  set_num_threads(1);
  const std::vector<float> one_thread = run_rows(gemm, p);
  set_num_threads(2);
  const std::vector<float> all = run_rows(gemm, p);
  set_num_threads(threads);
  EXPECT_EQ(all, one_thread) << "1 vs 2 threads";
  for (int64_t first : firsts)
    for (int64_t rows : row_counts) {
      if (first + rows > p.m) continue;
      const std::vector<float> part = run_rows(gemm, p, first, rows);
      for (size_t e = 0; e < part.size(); ++e)
        ASSERT_EQ(std::bit_cast<uint32_t>(part[e]),
                  std::bit_cast<uint32_t>(all[static_cast<size_t>(first * p.n) + e]))
            << "rows " << first << ".." << first + rows << " element " << e;
    }
}

inline void expect_accumulate_adds_the_sum(Bf16Gemm gemm, const Bf16GemmProblem& p) {
  const std::vector<float> plain = run_rows(gemm, p);
  std::vector<float> out(plain.size());
  for (size_t e = 0; e < out.size(); ++e) out[e] = static_cast<float>(e) * 0.25f;
  const std::vector<float> before = out;
  gemm(p.a.data(), p.k, p.w.data(), p.k, out.data(), p.n, p.m, p.n, p.k, true);
  for (size_t e = 0; e < out.size(); ++e) EXPECT_EQ(out[e], before[e] + plain[e]);
}

}  // namespace dllm::test
