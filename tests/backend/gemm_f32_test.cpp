// The batch-invariant GEMM (backend/cpu/gemm_f32.h): accuracy against a double-precision
// reference, bitwise invariance over the row count, the row's position and the thread count, and
// the SIMD kernel equal to the portable one bit for bit.
#include "backend/cpu/gemm_f32.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"

namespace dllm {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Shape {
  int64_t m, n, k;
};
struct Width {  // n and k of a Shape, paired with many m
  int64_t n, k;
};

// A product with row strides wider than the rows (pad 3, 5, 2) filled with random values.
struct Problem {
  int64_t m, n, k, lda, ldw, ldo;
  std::vector<float> a, w, out;

  Problem(Shape s, std::mt19937& rng)
      : m(s.m), n(s.n), k(s.k), lda(s.k + 3), ldw(s.k + 5), ldo(s.n + 2) {
    a = random_vec(size_t(m * lda), rng);
    w = random_vec(size_t(n * ldw), rng);
    out = random_vec(size_t(m * ldo), rng);
  }
  void run(bool accumulate) {
    cpu::gemm_nt_f32(a.data(), lda, w.data(), ldw, out.data(), ldo, m, n, k, accumulate);
  }
  void run_on(cpu::GemmKernel kernel, bool accumulate) {
    cpu::gemm_nt_f32_on(kernel, a.data(), lda, w.data(), ldw, out.data(), ldo, m, n, k, accumulate);
  }
};

// The kernels this CPU can run, the portable one included.
std::vector<cpu::GemmKernel> available_kernels() {
  std::vector<cpu::GemmKernel> kernels;
  for (const auto kernel : {cpu::GemmKernel::kPortable, cpu::GemmKernel::kAvx2,
                            cpu::GemmKernel::kAvx512, cpu::GemmKernel::kAvx512Wide})
    if (cpu::gemm_kernel_available(kernel)) kernels.push_back(kernel);
  return kernels;
}

// |got - exact| is at most about (k/8 + 4) roundings of Σ|a·w| (+ |out| when accumulating):
// k/8 fma steps per partial sum, three tree levels, the final add.
void expect_close_to_reference(const Problem& p, const std::vector<float>& before,
                               bool accumulate) {
  const double eps = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double exact = accumulate ? before[size_t(i * p.ldo + j)] : 0.0;
      double magnitude = std::abs(exact);
      for (int64_t t = 0; t < p.k; ++t) {
        const double prod = double(p.a[size_t(i * p.lda + t)]) * p.w[size_t(j * p.ldw + t)];
        exact += prod;
        magnitude += std::abs(prod);
      }
      const double bound = (double(p.k) / 8 + 5) * eps * magnitude;
      ASSERT_LE(std::abs(p.out[size_t(i * p.ldo + j)] - exact), bound)
          << "m=" << p.m << " n=" << p.n << " k=" << p.k << " at (" << i << ", " << j << ")";
    }
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = p.n; j < p.ldo; ++j)
      ASSERT_EQ(p.out[size_t(i * p.ldo + j)], before[size_t(i * p.ldo + j)])
          << "columns past n must be untouched";
}

TEST(GemmF32, MatchesDoubleReference) {
  std::mt19937 rng(11);
  const int64_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 64, 100};
  const Width widths[] = {{1, 1}, {3, 7}, {13, 33}, {67, 129}, {130, 260}, {5, 8}};
  for (const int64_t m : ms)
    for (const Width s : widths)
      for (const bool accumulate : {false, true}) {
        Problem p({m, s.n, s.k}, rng);
        const std::vector<float> before = p.out;
        p.run(accumulate);
        expect_close_to_reference(p, before, accumulate);
      }
}

TEST(GemmF32, EmptyReductionWritesZeroOrKeepsOut) {
  std::mt19937 rng(12);
  Problem p({3, 5, 0}, rng);
  const std::vector<float> before = p.out;
  p.run(/*accumulate=*/true);
  EXPECT_EQ(p.out, before);
  p.run(/*accumulate=*/false);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) EXPECT_EQ(p.out[size_t(i * p.ldo + j)], 0.0f);
}

// Every row of a 200-row a computed inside products of 1..64 rows starting at different rows is
// bitwise the row computed alone.
void expect_rows_invariant(cpu::GemmKernel kernel, int64_t n, int64_t k) {
  std::mt19937 rng(uint32_t(n * 1000 + k));
  const int64_t rows = 200;
  const std::vector<float> a = random_vec(size_t(rows * k), rng),
                           w = random_vec(size_t(n * k), rng);
  std::vector<float> alone(size_t(rows * n));
  for (int64_t i = 0; i < rows; ++i)
    cpu::gemm_nt_f32_on(kernel, &a[size_t(i * k)], k, w.data(), k, &alone[size_t(i * n)], n, 1, n,
                        k, false);
  for (int64_t m = 1; m <= 64; ++m)
    for (const int64_t first : {int64_t{0}, (m * 37) % (rows - m + 1), rows - m}) {
      std::vector<float> out(size_t(m * n));
      cpu::gemm_nt_f32_on(kernel, &a[size_t(first * k)], k, w.data(), k, out.data(), n, m, n, k,
                          false);
      ASSERT_EQ(std::memcmp(out.data(), &alone[size_t(first * n)], out.size() * sizeof(float)), 0)
          << cpu::gemm_kernel_name(kernel) << " n=" << n << " k=" << k << ": rows " << first << ".."
          << first + m - 1;
    }
}

TEST(GemmF32, RowsAreBatchInvariant) {
  for (const auto kernel : available_kernels()) {
    expect_rows_invariant(kernel, 77, 133);
    // OpenBLAS 0.3.21 differs here for 1 and 5 rows. (The portable kernel, one element at a time
    // and slow, is checked on the small shape only.)
    if (kernel != cpu::GemmKernel::kPortable) expect_rows_invariant(kernel, 256, 384);
  }
}

// A product large enough to run on several threads gives the same bits on one and on two.
TEST(GemmF32, ThreadCountInvariant) {
  std::mt19937 rng(13);
  const int threads = num_threads();
  for (const auto kernel : available_kernels())
    for (const Shape s : {Shape{200, 256, 384}, Shape{64, 1000, 257}, Shape{7, 4096, 256}}) {
      Problem p(s, rng);
      set_num_threads(1);
      p.run_on(kernel, false);
      const std::vector<float> one = p.out;
      set_num_threads(2);
      p.run_on(kernel, false);
      EXPECT_EQ(std::memcmp(one.data(), p.out.data(), one.size() * sizeof(float)), 0)
          << cpu::gemm_kernel_name(kernel) << " m=" << s.m << " n=" << s.n << " k=" << s.k;
    }
  set_num_threads(threads);
}

TEST(GemmF32, SimdKernelsMatchPortableBitwise) {
  const auto kernels = available_kernels();
  if (kernels.size() == 1) GTEST_SKIP() << "this CPU runs the portable kernel only";
  std::mt19937 rng(14);
  for (const auto kernel : kernels)
    for (const int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 13, 33, 100})
      for (const Width s : {Width{1, 1}, Width{7, 5}, Width{66, 131}, Width{129, 256},
                            Width{67, 700}, Width{9, 512}, Width{21, 1001}})
        for (const bool accumulate : {false, true}) {
          Problem p({m, s.n, s.k}, rng);
          Problem portable = p;
          p.run_on(kernel, accumulate);
          portable.run_on(cpu::GemmKernel::kPortable, accumulate);
          ASSERT_EQ(std::memcmp(p.out.data(), portable.out.data(), p.out.size() * sizeof(float)), 0)
              << cpu::gemm_kernel_name(kernel) << " vs portable, m=" << m << " n=" << s.n
              << " k=" << s.k << " accumulate=" << accumulate;
        }
}

}  // namespace
}  // namespace dllm
