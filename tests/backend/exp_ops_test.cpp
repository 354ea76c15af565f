// exp_ops.h: the AVX2 and AVX-512 kernels against the portable ones (the former inline loops of
// cpu_ops.cpp) bit for bit, and their exponentials against std::exp (glibc's expf) bit for bit.
#include "backend/cpu/exp_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

namespace dllm {
namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The SIMD kernels this CPU runs (the tests compare each with the portable kernels).
struct SimdKernels {
  const char* name;
  void (*expf)(const float*, float*, int64_t);
  bool (*softmax_row)(float*, const uint8_t*, int64_t, float);
  void (*silu_mul)(const float*, const float*, float*, int64_t, int64_t);
};
std::vector<SimdKernels> available_kernels() {
  std::vector<SimdKernels> k;
  if (cpu::exp_ops_avx2_available())
    k.push_back({"avx2", cpu::expf_avx2, cpu::softmax_row_avx2, cpu::silu_mul_avx2});
  if (cpu::exp_ops_avx512_available())
    k.push_back({"avx512", cpu::expf_avx512, cpu::softmax_row_avx512, cpu::silu_mul_avx512});
  return k;
}

// Compares the kernel's expf with std::exp on the floats from_bits(first + i * stride), i <
// count, a million at a time.
void expect_exp_matches(const SimdKernels& kernel, uint32_t first, uint32_t stride,
                        uint32_t count) {
  constexpr uint32_t kChunk = 1u << 20;
  std::vector<float> x(kChunk), got(kChunk);
  int64_t mismatches = 0;
  for (uint32_t done = 0; done < count;) {
    const uint32_t n = std::min(kChunk, count - done);
    for (uint32_t i = 0; i < n; ++i) x[i] = from_bits(first + (done + i) * stride);
    kernel.expf(x.data(), got.data(), n);
    for (uint32_t i = 0; i < n; ++i) {
      const float want = std::exp(x[i]);
      const bool same = bits(got[i]) == bits(want) || (std::isnan(got[i]) && std::isnan(want));
      if (!same && ++mismatches <= 5)
        ADD_FAILURE() << kernel.name << ": exp(" << std::hexfloat << x[i] << ") = " << got[i]
                      << ", std::exp " << want;
    }
    done += n;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ExpOps, ExpHasGlibcBitsEverywhereSoftmaxReaches) {
  const auto kernels = available_kernels();
  if (kernels.empty()) GTEST_SKIP() << "no AVX2 + FMA";
  for (const SimdKernels& k : kernels) {
    // Every float in [-2^-8, -128] (the softmax's s - mx <= 0 down past the underflow to 0), then
    // every 251st float of the whole range (positive, subnormal, huge, inf and NaN included).
    expect_exp_matches(k, bits(-0x1p-8f), 1, bits(-128.0f) - bits(-0x1p-8f) + 1);
    expect_exp_matches(k, bits(-0.0f), 1, 1u << 20);  // -0 and negative subnormals
    expect_exp_matches(k, 0, 251, 0xFFFFFFFFu / 251);
    const float special[] = {0.0f,   -0.0f,    INFINITY, -INFINITY, NAN,   88.72f,
                             88.73f, -103.97f, -103.28f, -103.3f,   -87.4f};
    for (float x : special) {
      float got;
      k.expf(&x, &got, 1);  // the scalar tail: std::exp itself
      std::vector<float> lanes(16, x), got16(16);
      k.expf(lanes.data(), got16.data(), 16);
      EXPECT_TRUE(bits(got16[3]) == bits(got) || (std::isnan(got) && std::isnan(got16[3])))
          << k.name << " " << x;
    }
  }
}

// Random rows of every length 1..70 (tails included), random masks (fully masked rows too),
// scores up to large magnitudes: the two kernels agree bit for bit.
TEST(ExpOps, SoftmaxSimdMatchesPortableBitForBit) {
  const auto kernels = available_kernels();
  if (kernels.empty()) GTEST_SKIP() << "no AVX2 + FMA";
  std::mt19937 rng(25);
  std::normal_distribution<float> score(0.0f, 6.0f);
  std::bernoulli_distribution keep(0.7);
  for (int64_t n = 1; n <= 70; ++n)
    for (int round = 0; round < 20; ++round) {
      std::vector<float> a(static_cast<size_t>(n));
      std::vector<uint8_t> vis(static_cast<size_t>(n) + 8);  // the 8-byte mask loads stay inside
      for (auto& x : a) x = score(rng) * (round % 4 == 3 ? 30.0f : 1.0f);
      for (auto& v : vis)
        v = round % 10 == 9 ? 0 : static_cast<uint8_t>(keep(rng) ? 1 + rng() % 255 : 0);
      const float scale = 0.125f;
      auto want = a;
      const bool seen = cpu::softmax_row_portable(want.data(), vis.data(), n, scale);
      for (const SimdKernels& k : kernels) {
        auto b = a;
        ASSERT_EQ(k.softmax_row(b.data(), vis.data(), n, scale), seen) << k.name << " " << n;
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(bits(want[j]), bits(b[j])) << k.name << " n " << n << " j " << j;
      }
    }
}

// Several rows at once (the AVX-512 kernel adds four rows' sums side by side): each row's bits
// are the portable kernel's on that row alone, rows that see nothing among them, 1-9 rows.
TEST(ExpOps, SoftmaxRowsMatchPortableRowByRow) {
  std::mt19937 rng(26);
  std::normal_distribution<float> score(0.0f, 6.0f);
  std::bernoulli_distribution keep(0.7);
  using RowsKernel = void (*)(float*, const uint8_t*, int64_t, int64_t, float, bool*);
  std::vector<RowsKernel> kernels = {cpu::softmax_rows};
  if (cpu::exp_ops_avx512_available()) kernels.push_back(cpu::softmax_rows_avx512);
  for (const int64_t n : {1, 15, 16, 17, 40, 70})
    for (int64_t rows = 1; rows <= 9; ++rows) {
      std::vector<float> a(static_cast<size_t>(rows * n));
      std::vector<uint8_t> vis(a.size() + 16);
      for (auto& x : a) x = score(rng);
      for (auto& v : vis) v = keep(rng) ? 1 : 0;
      for (int64_t j = 0; j < n; ++j) vis[static_cast<size_t>(j + (rows / 2) * n)] = 0;  // blind
      std::vector<float> want = a;
      std::vector<bool> want_seen;
      for (int64_t r = 0; r < rows; ++r)
        want_seen.push_back(cpu::softmax_row_portable(&want[r * n], &vis[r * n], n, 0.25f));
      for (RowsKernel k : kernels) {
        std::vector<float> got = a;
        auto seen = std::make_unique<bool[]>(static_cast<size_t>(rows));
        k(got.data(), vis.data(), n, rows, 0.25f, seen.get());
        for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(seen[r], want_seen[r]) << n << " " << r;
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_EQ(bits(got[i]), bits(want[i])) << "n " << n << " rows " << rows << " at " << i;
        std::vector<float> unasked = a;  // without `seen`: the same rows
        k(unasked.data(), vis.data(), n, rows, 0.25f, nullptr);
        ASSERT_TRUE(unasked == got) << "n " << n << " rows " << rows << ", seen not asked for";
      }
    }
}

// The portable kernel itself against a double-precision softmax.
TEST(ExpOps, SoftmaxPortableMatchesNaiveReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> score(0.0f, 3.0f);
  const int64_t n = 37;
  std::vector<float> s(n);
  std::vector<uint8_t> vis(n);
  for (auto& x : s) x = score(rng);
  for (int64_t j = 0; j < n; ++j) vis[j] = j % 3 != 1;
  const auto raw = s;
  ASSERT_TRUE(cpu::softmax_row_portable(s.data(), vis.data(), n, 0.5f));
  double mx = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; ++j)
    if (vis[j]) mx = std::max(mx, 0.5 * raw[j]);
  for (int64_t j = 0; j < n; ++j) sum += vis[j] ? std::exp(0.5 * raw[j] - mx) : 0.0;
  for (int64_t j = 0; j < n; ++j)
    EXPECT_NEAR(s[j], vis[j] ? std::exp(0.5 * raw[j] - mx) / sum : 0.0, 1e-6);
}

// silu(gate) · up: random values (large ones, where exp(-g) over- and underflows, included),
// every offset and length 0..40 of the range (the 8-wide body and the scalar tail), bit for bit;
// and the portable kernel against a double-precision reference.
TEST(ExpOps, SiluMulSimdMatchesPortableBitForBit) {
  const auto kernels = available_kernels();
  if (kernels.empty()) GTEST_SKIP() << "no AVX2 + FMA";
  std::mt19937 rng(18);
  std::normal_distribution<float> d(0.0f, 4.0f);
  const int64_t n = 64;
  std::vector<float> gate(n), up(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = d(rng) * (i % 7 == 0 ? 40.0f : 1.0f);
    up[i] = d(rng);
  }
  for (int64_t first = 0; first < 8; ++first)
    for (int64_t len = 0; first + len <= 40; ++len) {
      std::vector<float> a(n, -1.0f);
      cpu::silu_mul_portable(gate.data(), up.data(), a.data(), first, first + len);
      for (const SimdKernels& k : kernels) {
        std::vector<float> b(n, -1.0f);
        k.silu_mul(gate.data(), up.data(), b.data(), first, first + len);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(bits(a[i]), bits(b[i])) << k.name << " " << first << " " << len;
      }
    }
  std::vector<float> out(n);
  cpu::silu_mul_portable(gate.data(), up.data(), out.data(), 0, n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], want = g / (1.0 + std::exp(-g)) * up[i];
    EXPECT_NEAR(out[i], want, 1e-5 * (1.0 + std::abs(want))) << i;
  }
}

}  // namespace
}  // namespace dllm
