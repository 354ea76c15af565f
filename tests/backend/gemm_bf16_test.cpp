// The opt-in bf16 GEMM (backend/cpu/gemm_bf16.h): against a double-precision product of the
// activations rounded to bf16 (an independent scalar rounding) and the bf16 weights, on fresh
// random inputs and odd shapes; batch invariance (a row's bits alone, in any batch, at any
// position, on 1 or 2 threads); matmul_nt's dispatch under --cpu-matmul; the option's errors.
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/matmul_precision.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_weight.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "support/bf16_gemm_checks.h"
#include "support/scoped_matmul.h"

namespace dllm {
namespace {

using test::random_problem;
using test::to_bf16;
using test::widen;
using Problem = test::Bf16GemmProblem;

std::vector<float> run(const Problem& p) {
  return test::run_rows(cpu::gemm_nt_bf16, p);
}

class GemmBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::gemm_bf16_available()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  }
};

TEST_F(GemmBf16, MatchesDoubleProductOfRoundedActivations) {
  std::mt19937 rng(11);
  for (const auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1},
                               {4, 7, 15},
                               {5, 64, 16},
                               {32, 33, 17},
                               {13, 130, 256},
                               {40, 9, 303},
                               {7, 70, 1024}}) {
    const Problem p = random_problem(m, n, k, rng);
    const std::vector<float> out = run(p);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const test::DoubleProduct ref =
            test::double_product(p, i, j, [](float x) { return widen(to_bf16(x)); });
        // fp32 accumulation: k / 8 additions per lane and the 3-level tree, each <= 2^-24.
        const double tol = (double(k) / 8 + 8) * std::ldexp(ref.magnitude, -24) + 1e-30;
        ASSERT_NEAR(out[static_cast<size_t>(i * n + j)], ref.value, tol)
            << "m " << m << " n " << n << " k " << k << " at " << i << "," << j;
      }
  }
}

TEST_F(GemmBf16, RowsAreBatchAndThreadInvariant) {
  std::mt19937 rng(12);
  const Problem p = random_problem(37, 300, 257, rng);  // 37 x 300 x 257: parallel blocks
  test::expect_rows_batch_and_thread_invariant(cpu::gemm_nt_bf16, p, {0, 1, 5, 30},
                                               {1, 2, 4, 6, 7});
}

// The 512-bit tiles (two output elements a register) give the 256-bit tiles' bits: every edge
// tile (1-13 rows, 1-17 columns), k with and without a padded last chunk, accumulating or not.
TEST_F(GemmBf16, WideTilesGiveTheNarrowTilesBits) {
  std::mt19937 rng(15);
  for (const int64_t k : {16, 40, 257})
    for (int64_t m = 1; m <= 13; m += 3)
      for (int64_t n = 1; n <= 17; ++n) {
        const Problem p = random_problem(m, n, k, rng);
        for (const bool accumulate : {false, true}) {
          std::vector<float> narrow(static_cast<size_t>(m * n), 0.5f), wide = narrow;
          cpu::gemm_nt_bf16_on(false, p.a.data(), k, p.w.data(), k, narrow.data(), n, m, n, k,
                               accumulate);
          cpu::gemm_nt_bf16_on(true, p.a.data(), k, p.w.data(), k, wide.data(), n, m, n, k,
                               accumulate);
          for (size_t e = 0; e < wide.size(); ++e)
            ASSERT_EQ(std::bit_cast<uint32_t>(wide[e]), std::bit_cast<uint32_t>(narrow[e]))
                << m << " x " << n << " x " << k << " accumulate " << accumulate << " at " << e;
        }
      }
}

TEST_F(GemmBf16, AccumulateAddsTheSumToOut) {
  std::mt19937 rng(13);
  test::expect_accumulate_adds_the_sum(cpu::gemm_nt_bf16, random_problem(6, 10, 40, rng));
}

TEST_F(GemmBf16, MatmulUsesItOnlyWhenChosenAndOnlyForBf16Weights) {
  std::mt19937 rng(14);
  const Problem p = random_problem(4, 24, 48, rng);
  cpu::WeightMatrix w;
  w.dtype = DType::kBF16;
  w.data = p.w.data();
  w.rows = p.n;
  w.cols = p.k;
  test::ScopedMatmul fma_kernels(cpu::MatmulPrecision::kFp32);
  std::vector<float> fp32(static_cast<size_t>(p.m * p.n)), bf16(fp32.size());
  cpu::matmul_nt(p.a.data(), p.k, w, fp32.data(), p.n, p.m);
  {
    test::ScopedMatmul dot(cpu::MatmulPrecision::kBf16);
    cpu::matmul_nt(p.a.data(), p.k, w, bf16.data(), p.n, p.m);
  }
  EXPECT_EQ(bf16, run(p));
  EXPECT_NE(bf16, fp32) << "activations rounded to bf16 change some bits";
  std::vector<float> again(fp32.size());
  cpu::matmul_nt(p.a.data(), p.k, w, again.data(), p.n, p.m);
  EXPECT_EQ(again, fp32) << "fp32 is back";
}

TEST(GemmBf16Option, BadValuesNameTheOption) {
  EXPECT_EQ(cpu::parse_matmul_precision("fp32"), cpu::MatmulPrecision::kFp32);
  EXPECT_EQ(cpu::parse_matmul_precision("bf16"), cpu::MatmulPrecision::kBf16);
  EXPECT_EQ(cpu::parse_matmul_precision("amx"), cpu::MatmulPrecision::kAmx);
  for (const auto p :
       {cpu::MatmulPrecision::kFp32, cpu::MatmulPrecision::kAmx, cpu::MatmulPrecision::kBf16})
    EXPECT_EQ(cpu::parse_matmul_precision(cpu::matmul_precision_name(p)), p);
  try {
    cpu::parse_matmul_precision("fp16");
    FAIL() << "fp16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cpu-matmul must be fp32, amx or bf16"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dllm
