// The AMX GEMM (backend/cpu/gemm_amx.h): exact products (one-hot weights pick activations out bit
// for bit, so no part of the three-way split is lost), fp32 sums against a double-precision
// product on fresh random inputs and odd shapes (k, n, m off the tile sizes), batch invariance (a
// row's bits alone, in any batch, at any position, on 1 or 2 threads), accumulation, and
// matmul_nt's dispatch under --cpu-matmul.
#include "backend/cpu/gemm_amx.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_weight.h"
#include "backend/cpu/gemm_f32.h"
#include "backend/cpu/matmul_precision.h"
#include "core/thread_pool.h"
#include "support/bf16_gemm_checks.h"
#include "support/scoped_matmul.h"

namespace dllm {
namespace {

using test::random_problem;
using test::to_bf16;
using Problem = test::Bf16GemmProblem;

std::vector<float> run(const Problem& p) {
  return test::run_rows(cpu::gemm_nt_amx, p);
}

class GemmAmx : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::gemm_amx_available()) GTEST_SKIP() << "this CPU (or kernel) offers no AMX-BF16";
  }
};

// Weight row j is one-hot at k = j: out[i][j] must be a[i][j] itself, every bit — the three bf16
// parts of each activation sum back to it exactly. Activations with full 24-bit significands and
// exponents from 2^-60 to 2^60.
TEST_F(GemmAmx, OneHotWeightsPickActivationsOutExactly) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-60, 60);
  for (const int64_t k : {1, 31, 33, 100}) {
    const int64_t m = 19, n = k;
    Problem p{m, n, k, std::vector<float>(static_cast<size_t>(m * k)),
              std::vector<uint16_t>(static_cast<size_t>(n * k), 0)};
    for (float& v : p.a) v = std::ldexp(mantissa(rng), exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
    for (int64_t j = 0; j < n; ++j) p.w[static_cast<size_t>(j * k + j)] = to_bf16(1.0f);
    const std::vector<float> out = run(p);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(std::bit_cast<uint32_t>(out[static_cast<size_t>(i * n + j)]),
                  std::bit_cast<uint32_t>(p.a[static_cast<size_t>(i * k + j)]))
            << "k " << k << " at " << i << "," << j;
  }
}

TEST_F(GemmAmx, MatchesDoubleProduct) {
  std::mt19937 rng(22);
  for (const auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1},
                               {4, 7, 15},
                               {5, 64, 32},
                               {16, 65, 33},
                               {17, 130, 256},
                               {40, 9, 303},
                               {7, 70, 1024},
                               {33, 200, 96}}) {
    const Problem p = random_problem(m, n, k, rng);
    const std::vector<float> out = run(p);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const test::DoubleProduct ref = test::double_product(p, i, j, [](float x) { return x; });
        // Exact products, 3 k fp32 additions in sequence (hi, mid and lo of each pair), each
        // rounding by at most 2^-24 of a partial sum bounded by the magnitude.
        const double tol = double(3 * k + 8) * std::ldexp(ref.magnitude, -24) + 1e-30;
        ASSERT_NEAR(out[static_cast<size_t>(i * n + j)], ref.value, tol)
            << "m " << m << " n " << n << " k " << k << " at " << i << "," << j;
      }
  }
}

TEST_F(GemmAmx, RowsAreBatchAndThreadInvariant) {
  std::mt19937 rng(23);
  const Problem p = random_problem(70, 300, 257, rng);  // 5 m tiles, 5 column blocks
  test::expect_rows_batch_and_thread_invariant(cpu::gemm_nt_amx, p, {0, 1, 5, 16, 30, 63},
                                               {1, 2, 4, 7, 16, 17});
}

TEST_F(GemmAmx, AccumulateAddsTheSumToOut) {
  std::mt19937 rng(24);
  test::expect_accumulate_adds_the_sum(cpu::gemm_nt_amx, random_problem(6, 70, 40, rng));
}

// Under amx (the default on this CPU) a matrix that amx_pays_off() goes to the tiles and a smaller
// one to the FMA kernels; under --cpu-matmul fp32 both to the FMA kernels; tiles and FMA within
// fp32 rounding of each other.
TEST_F(GemmAmx, MatmulUsesItForLargeMatricesUnderAmx) {
  EXPECT_TRUE(cpu::amx_pays_off(1024, 1024));
  EXPECT_TRUE(cpu::amx_pays_off(512, 2048));
  EXPECT_FALSE(cpu::amx_pays_off(4096, 256)) << "k < 512";
  EXPECT_FALSE(cpu::amx_pays_off(768, 768)) << "fewer than 2^20 weights";
  std::mt19937 rng(25);
  for (const auto [n, k] : {std::array<int64_t, 2>{1024, 1024}, {48, 600}}) {
    const Problem p = random_problem(5, n, k, rng);
    cpu::WeightMatrix w;
    w.dtype = DType::kBF16;
    w.data = p.w.data();
    w.rows = p.n;
    w.cols = p.k;
    std::vector<float> amx(static_cast<size_t>(p.m * p.n)), fp32(amx.size()), fma(amx.size());
    std::vector<float> amx_for_all(amx.size());
    {
      test::ScopedMatmul tiles(cpu::MatmulPrecision::kAmx);
      cpu::matmul_nt(p.a.data(), p.k, w, amx.data(), p.n, p.m);
    }
    {
      test::ScopedMatmul tiles(cpu::MatmulPrecision::kAmx, test::kAmxForAll);
      cpu::matmul_nt(p.a.data(), p.k, w, amx_for_all.data(), p.n, p.m);
    }
    {
      test::ScopedMatmul fma_kernels(cpu::MatmulPrecision::kFp32);
      cpu::matmul_nt(p.a.data(), p.k, w, fp32.data(), p.n, p.m);
    }
    cpu::gemm_nt(p.a.data(), p.k, DType::kBF16, p.w.data(), p.k, fma.data(), p.n, p.m, p.n, p.k,
                 false);
    EXPECT_EQ(fp32, fma) << n << " x " << k;
    EXPECT_EQ(amx, cpu::amx_pays_off(n, k) ? run(p) : fma) << n << " x " << k;
    if (cpu::amx_pays_off(n, k)) EXPECT_NE(amx, fma) << "the tiles add in another order";
    EXPECT_EQ(amx_for_all, run(p)) << n << " x " << k << ": a zero threshold takes every matrix";
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        // Both sums' rounding is bounded by their additions times the products' magnitude.
        const double mag = test::double_product(p, i, j, [](float x) { return x; }).magnitude;
        ASSERT_NEAR(amx[static_cast<size_t>(i * n + j)], fp32[static_cast<size_t>(i * n + j)],
                    double(4 * k + 16) * std::ldexp(mag, -24))
            << i << "," << j;
      }
  }
}

// Every test that sets the precision restores it, so this holds in any order of tests.
TEST(MatmulPrecisionDefault, IsAmxWhereTheCpuHasItElseFp32) {
  const cpu::MatmulPrecision before = cpu::matmul_precision();
  EXPECT_EQ(before,
            cpu::gemm_amx_available() ? cpu::MatmulPrecision::kAmx : cpu::MatmulPrecision::kFp32);
  EXPECT_EQ(cpu::parse_matmul_precision("amx"), cpu::MatmulPrecision::kAmx);
  if (!cpu::gemm_amx_available()) {
    try {
      cpu::set_matmul_precision(cpu::MatmulPrecision::kAmx);
      FAIL() << "amx accepted without AMX";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("--cpu-matmul amx needs"), std::string::npos)
          << e.what();
    }
  }
  cpu::set_matmul_precision(before);
}

}  // namespace
}  // namespace dllm
