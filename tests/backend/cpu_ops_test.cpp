// CPU ops against naive double-precision references on fresh random inputs.
#include "backend/cpu/cpu_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace dllm {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double max_rel(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(a[i] - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return num / den;
}

TEST(CpuOps, MatmulNtWithStridesAndAccumulate) {
  std::mt19937 rng(1);
  const int64_t m = 7, n = 13, k = 33, lda = 40, ldw = 35, ldo = 20;
  auto a = random_vec(m * lda, rng), w = random_vec(n * ldw, rng), out = random_vec(m * ldo, rng);
  const auto before = out;
  cpu::matmul_nt(a.data(), lda, w.data(), ldw, out.data(), ldo, m, n, k, /*accumulate=*/true);
  std::vector<float> got;
  std::vector<double> ref;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = before[i * ldo + j];
      for (int64_t t = 0; t < k; ++t) s += double(a[i * lda + t]) * w[j * ldw + t];
      got.push_back(out[i * ldo + j]);
      ref.push_back(s);
    }
  EXPECT_LT(max_rel(got, ref), 1e-5);
  EXPECT_EQ(out[ldo - 1], before[ldo - 1]) << "columns past n must be untouched";
}

TEST(CpuOps, RmsNorm) {
  std::mt19937 rng(2);
  const int64_t rows = 5, dim = 37;
  auto x = random_vec(rows * dim, rng, 3.0f), w = random_vec(dim, rng);
  std::vector<float> out(x.size());
  cpu::rms_norm(x.data(), dim, w.data(), out.data(), dim, rows, dim, 1e-5f);
  std::vector<double> ref;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int64_t i = 0; i < dim; ++i) ref.push_back(x[r * dim + i] * inv * w[i]);
  }
  EXPECT_LT(max_rel(out, ref), 1e-6);
}

// NeoX RoPE with full and partial rotary dims, explicit (non-contiguous) positions.
TEST(CpuOps, RopeNeoxFullAndPartial) {
  std::mt19937 rng(3);
  for (int64_t rotary : {64, 32, 16}) {
    SCOPED_TRACE(rotary);
    const int64_t rows = 4, heads = 3, hd = 64, stride = heads * hd + 5;
    const std::vector<int32_t> pos = {0, 7, 300, 12345};
    auto x = random_vec(rows * stride, rng);
    auto y = x;
    const double theta = 600000.0;
    const auto inv = cpu::rope_inv_freq(theta, rotary);
    cpu::rope_neox(y.data(), stride, rows, heads, hd, rotary, pos, inv);
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < hd; ++i) {
          const float* v = &x[r * stride + h * hd];
          double e;
          if (i >= rotary) {
            e = v[i];
          } else {
            const int64_t half = rotary / 2, j = i % half;
            const double ang = pos[r] * std::pow(theta, -2.0 * j / rotary);
            e = i < half ? v[j] * std::cos(ang) - v[j + half] * std::sin(ang)
                         : v[j + half] * std::cos(ang) + v[j] * std::sin(ang);
          }
          got.push_back(y[r * stride + h * hd + i]);
          ref.push_back(e);
        }
    // fp32 angles at position 12345 carry ~1e-3 rad of rounding, like Hugging Face's fp32 RoPE.
    EXPECT_LT(max_rel(got, ref), 3e-3);
    EXPECT_EQ(y[stride - 1], x[stride - 1]) << "padding past the heads must be untouched";
  }
}

TEST(CpuOps, SiluMul) {
  std::mt19937 rng(4);
  auto g = random_vec(100, rng, 4.0f), u = random_vec(100, rng);
  std::vector<float> out(100);
  cpu::silu_mul(g.data(), u.data(), out.data(), 100);
  std::vector<double> ref;
  for (int i = 0; i < 100; ++i) ref.push_back(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
  EXPECT_LT(max_rel(out, ref), 1e-6);
}

// Attention with GQA ratios 1, 4 and 7, random visibility (incl. a row that sees nothing) and keys
// gathered from scattered rows.
TEST(CpuOps, AttentionMatchesNaive) {
  std::mt19937 rng(5);
  for (auto [heads, kv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{7, 1}}) {
    SCOPED_TRACE(heads);
    const int64_t nq = 6, nk = 19, d = 16, qs = heads * d + 3, kvd = kv * d;
    auto q = random_vec(nq * qs, rng);
    auto kstore = random_vec(nk * 2 * kvd, rng), vstore = random_vec(nk * 2 * kvd, rng);
    std::vector<const float*> krows, vrows;
    for (int64_t j = 0; j < nk;
         ++j) {  // every other row of the store, reversed: keys need not be contiguous
      krows.push_back(&kstore[(2 * (nk - 1 - j)) * kvd]);
      vrows.push_back(&vstore[(2 * (nk - 1 - j)) * kvd]);
    }
    std::vector<uint8_t> vis(nq * nk);
    for (auto& b : vis) b = rng() % 3 != 0;
    for (int64_t j = 0; j < nk; ++j) vis[2 * nk + j] = 0;  // row 2 sees nothing -> zeros
    std::vector<float> out(nq * qs, 123.0f);
    const float scale = 0.25f;
    cpu::attention(q.data(), qs, krows, vrows, vis, out.data(), qs, nq, heads, kv, d, scale);
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t g = h / (heads / kv);
        std::vector<double> s(nk);
        double mx = -1e300;
        for (int64_t j = 0; j < nk; ++j) {
          double dot = 0;
          for (int64_t t = 0; t < d; ++t)
            dot += double(q[i * qs + h * d + t]) * krows[j][g * d + t];
          s[j] = dot * scale;
          if (vis[i * nk + j]) mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < nk; ++j) sum += s[j] = vis[i * nk + j] ? std::exp(s[j] - mx) : 0.0;
        for (int64_t t = 0; t < d; ++t) {
          double o = 0;
          for (int64_t j = 0; j < nk; ++j) o += sum > 0 ? s[j] / sum * vrows[j][g * d + t] : 0.0;
          got.push_back(out[i * qs + h * d + t]);
          ref.push_back(o);
        }
      }
    EXPECT_LT(max_rel(got, ref), 1e-5);
    for (int64_t t = 0; t < heads * d; ++t) EXPECT_EQ(out[2 * qs + t], 0.0f);
  }
}

}  // namespace
}  // namespace dllm
