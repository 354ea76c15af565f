// The batch-invariant GEMM over weights in their stored dtype (backend/cpu/gemm_f32.h, gemm_nt):
// bf16 and f16 weights widened in registers give, on every kernel, exactly the bits of the fp32
// product over their widened copies (the path the CPU backend took before it kept weights in the
// file's dtype); they match a double-precision reference on fresh random inputs; rows are batch
// invariant; unaligned weight rows (mapped files) read correctly. Also cpu::WeightMatrix, the
// backend's view of a checkpoint tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_weight.h"
#include "backend/cpu/gemm_f32.h"
#include "backend/cpu/matmul_precision.h"
#include "core/dtype.h"
#include "io/safetensors.h"
#include "support/scoped_matmul.h"

namespace dllm {
namespace {

// IEEE half of a float (round to nearest even; inputs here are in f16's range), for test data.
uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (a < std::ldexp(1.0f, -14)) {  // subnormal half: a multiple of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint((m * 2 - 1) * 1024));
  uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  if (mant == 1024) {
    mant = 0;
    ++exp;
  }
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

// n × ld 16-bit weights of `dtype` from normal(0, 1) values (for f16 a few subnormals and large
// values too), and their exact fp32 widening.
struct HalfWeights {
  std::vector<uint16_t> bits;
  std::vector<float> widened;
};
HalfWeights random_half(DType dtype, size_t count, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  HalfWeights w;
  w.bits.resize(count);
  w.widened.resize(count);
  for (size_t i = 0; i < count; ++i) {
    float v = d(rng);
    if (dtype == DType::kF16 && i % 17 == 3) v *= 1e-6f;  // f16 subnormals
    if (dtype == DType::kF16 && i % 29 == 5) v *= 3000.0f;
    w.bits[i] = dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    w.widened[i] = dtype == DType::kBF16 ? bf16_to_f32(w.bits[i]) : f16_to_f32(w.bits[i]);
  }
  return w;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<cpu::GemmKernel> available_kernels() {
  std::vector<cpu::GemmKernel> kernels;
  for (const auto kernel : {cpu::GemmKernel::kPortable, cpu::GemmKernel::kAvx2,
                            cpu::GemmKernel::kAvx512, cpu::GemmKernel::kAvx512Wide})
    if (cpu::gemm_kernel_available(kernel)) kernels.push_back(kernel);
  return kernels;
}

const char* name(DType d) {
  return d == DType::kBF16 ? "bf16" : "f16";
}

// Every kernel, both half dtypes, odd sizes, 1..64 rows, strided rows, with and without
// accumulation: the half-weight product is bitwise the fp32 product over the widened weights,
// bitwise the portable kernel's, and within the fp32 rounding bound of a double reference.
TEST(GemmWeights, HalfWeightsGiveTheBitsOfTheirFp32Widening) {
  std::mt19937 rng(21);
  struct Width {
    int64_t n, k;
  };
  for (const DType dtype : {DType::kBF16, DType::kF16})
    for (const auto kernel : available_kernels())
      for (const int64_t m : {1, 2, 3, 5, 6, 7, 13, 32, 64})
        for (const Width s : {Width{1, 1}, Width{5, 7}, Width{13, 33}, Width{67, 129},
                              Width{130, 260}, Width{9, 1001}})
          for (const bool accumulate : {false, true}) {
            const int64_t lda = s.k + 3, ldw = s.k + 5, ldo = s.n + 2;
            const std::vector<float> a = random_vec(size_t(m * lda), rng);
            const HalfWeights w = random_half(dtype, size_t(s.n * ldw), rng);
            const std::vector<float> before = random_vec(size_t(m * ldo), rng);
            std::vector<float> half = before, f32 = before, portable = before;
            cpu::gemm_nt_on(kernel, a.data(), lda, dtype, w.bits.data(), ldw, half.data(), ldo, m,
                            s.n, s.k, accumulate);
            cpu::gemm_nt_f32_on(kernel, a.data(), lda, w.widened.data(), ldw, f32.data(), ldo, m,
                                s.n, s.k, accumulate);
            cpu::gemm_nt_on(cpu::GemmKernel::kPortable, a.data(), lda, dtype, w.bits.data(), ldw,
                            portable.data(), ldo, m, s.n, s.k, accumulate);
            const std::string what = std::string(cpu::gemm_kernel_name(kernel)) + " " +
                                     name(dtype) + " m=" + std::to_string(m) +
                                     " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
            ASSERT_EQ(std::memcmp(half.data(), f32.data(), half.size() * 4), 0) << what;
            ASSERT_EQ(std::memcmp(half.data(), portable.data(), half.size() * 4), 0) << what;
            const double eps = std::ldexp(1.0, -24);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < s.n; ++j) {
                double exact = accumulate ? before[size_t(i * ldo + j)] : 0.0;
                double magnitude = std::abs(exact);
                for (int64_t t = 0; t < s.k; ++t) {
                  const double p =
                      double(a[size_t(i * lda + t)]) * double(w.widened[size_t(j * ldw + t)]);
                  exact += p;
                  magnitude += std::abs(p);
                }
                ASSERT_LE(std::abs(half[size_t(i * ldo + j)] - exact),
                          (double(s.k) / 8 + 5) * eps * magnitude)
                    << what << " at (" << i << ", " << j << ")";
              }
              for (int64_t j = s.n; j < ldo; ++j)
                ASSERT_EQ(half[size_t(i * ldo + j)], before[size_t(i * ldo + j)])
                    << what << ": columns past n must be untouched";
            }
          }
}

// Every row of a 150-row a inside products of 1..64 rows at different offsets is bitwise the row
// computed alone, with bf16 weights whose rows start at odd byte offsets (as in a mapped file).
TEST(GemmWeights, Bf16RowsAreBatchInvariantAndUnalignedRowsRead) {
  std::mt19937 rng(22);
  const int64_t rows = 150, n = 71, k = 203;
  const std::vector<float> a = random_vec(size_t(rows * k), rng);
  const HalfWeights w = random_half(DType::kBF16, size_t(n * k), rng);
  // The same weights one byte past a 16-byte boundary.
  std::vector<unsigned char> shifted(w.bits.size() * 2 + 17);
  std::memcpy(shifted.data() + 1, w.bits.data(), w.bits.size() * 2);
  for (const auto kernel : available_kernels()) {
    std::vector<float> alone(size_t(rows * n));
    for (int64_t i = 0; i < rows; ++i)
      cpu::gemm_nt_f32_on(kernel, &a[size_t(i * k)], k, w.widened.data(), k, &alone[size_t(i * n)],
                          n, 1, n, k, false);
    for (int64_t m = 1; m <= 64; ++m)
      for (const int64_t first : {int64_t{0}, (m * 37) % (rows - m + 1), rows - m}) {
        std::vector<float> out(size_t(m * n));
        cpu::gemm_nt_on(kernel, &a[size_t(first * k)], k, DType::kBF16, shifted.data() + 1, k,
                        out.data(), n, m, n, k, false);
        ASSERT_EQ(std::memcmp(out.data(), &alone[size_t(first * n)], out.size() * 4), 0)
            << cpu::gemm_kernel_name(kernel) << ": rows " << first << ".." << first + m - 1;
      }
  }
}

// The backend's view of a checkpoint tensor: dtype and shape as stored, row slices of a fused
// weight, embedding rows widened exactly, and matmul_nt on it equal to the fp32 product.
TEST(GemmWeights, WeightMatrixViewsATensorInPlace) {
  std::mt19937 rng(23);
  const int64_t rows = 12, cols = 37;
  const HalfWeights w = random_half(DType::kBF16, size_t(rows * cols), rng);
  TensorEntry t;
  t.name = "w";
  t.dtype_name = "BF16";
  t.dtype = DType::kBF16;
  t.shape = {rows, cols};
  t.data = reinterpret_cast<const unsigned char*>(w.bits.data());
  t.nbytes = w.bits.size() * 2;
  const cpu::WeightMatrix m = cpu::WeightMatrix::of(&t);
  EXPECT_EQ(m.rows, rows);
  EXPECT_EQ(m.cols, cols);
  EXPECT_EQ(m.data, t.data);  // no copy
  EXPECT_EQ(m.bytes(), t.nbytes);
  EXPECT_TRUE(cpu::WeightMatrix::of(nullptr).empty());

  std::vector<float> row(static_cast<size_t>(cols));
  m.row_to_f32(5, row.data());
  for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(row[size_t(j)], w.widened[size_t(5 * cols + j)]);

  const cpu::WeightMatrix slice = m.row_slice(4, 5);
  const int64_t batch = 3;
  const std::vector<float> a = random_vec(size_t(batch * cols), rng);
  std::vector<float> got(size_t(batch * 5)), want(got.size());
  // The FMA kernels: the bits of the fp32 GEMM over the widened slice (the AMX default where the
  // CPU has it adds in another order: gemm_amx_test.cpp).
  {
    test::ScopedMatmul fma_kernels(cpu::MatmulPrecision::kFp32);
    cpu::matmul_nt(a.data(), cols, slice, got.data(), 5, batch);
  }
  cpu::gemm_nt_f32(a.data(), cols, &w.widened[size_t(4 * cols)], cols, want.data(), 5, batch, 5,
                   cols, false);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);

  // fp32 bytes at an odd address get an aligned copy with the same values.
  std::vector<float> f = random_vec(size_t(rows * cols), rng);
  std::vector<unsigned char> odd(f.size() * 4 + 1);
  std::memcpy(odd.data() + 1, f.data(), f.size() * 4);
  TensorEntry t32 = t;
  t32.dtype_name = "F32";
  t32.dtype = DType::kF32;
  t32.data = odd.data() + 1;
  t32.nbytes = f.size() * 4;
  const cpu::WeightMatrix m32 = cpu::WeightMatrix::of(&t32);
  ASSERT_NE(m32.owned, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m32.data) % alignof(float), 0u);
  EXPECT_EQ(std::memcmp(m32.data, f.data(), f.size() * 4), 0);
}

}  // namespace
}  // namespace dllm
