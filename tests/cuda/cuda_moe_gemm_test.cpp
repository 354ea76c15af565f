// The MoE grouped GEMM (kernels.h moe_grouped_gemm, tensor cores) against a naive CPU computation
// on fresh random inputs — row counts per expert of 0, 1, odd, exactly and just past a tile of
// rows and a warp's half of it, k and n_out off the kernel's tiles, gathered and sorted inputs,
// fp32 and bf16 outputs — the fused SwiGLU against the bf16 GEMM followed by swiglu() (bitwise),
// its bitwise batch invariance (a row's output alone vs with 1..64 and more other rows on its
// expert), and its refusals of shapes outside the contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"

namespace dllm {
namespace {

struct GemmShape {
  int n_out, k;
};

// One routed assignment per token (top_k 1): expert e gets counts[e] tokens, in a random order.
std::vector<int32_t> route_by_counts(const std::vector<int>& counts, std::mt19937& rng) {
  std::vector<int32_t> routed;
  for (size_t e = 0; e < counts.size(); ++e) routed.insert(routed.end(), size_t(counts[e]), int(e));
  std::shuffle(routed.begin(), routed.end(), rng);
  return routed;
}

// Device copies of one test case's routing and operands.
struct GemmCase {
  int n = 0, experts = 0;
  std::vector<float> x, w;  // bf16-rounded values
  cuda::DeviceBuffer<uint16_t> d_x, d_w;
  cuda::DeviceBuffer<int32_t> d_routed, offsets, order, position, work;

  GemmCase(const std::vector<int32_t>& routed, std::vector<float> xs, std::vector<float> ws,
           int num_experts)
      : n(int(routed.size())),
        experts(num_experts),
        x(std::move(xs)),
        w(std::move(ws)),
        d_x(test::to_device(test::round_bf16(x))),
        d_w(test::to_device(test::round_bf16(w))),
        d_routed(test::to_device(routed)),
        offsets(size_t(num_experts + 1), "offsets"),
        order(size_t(std::max(n, 1)), "order"),
        position(size_t(std::max(n, 1)), "position"),
        work(size_t(cuda::moe_work_list_ints(n, num_experts)), "work list") {
    cuda::moe_sort(d_routed.get(), n, 1, 0, experts, false, offsets.get(), order.get(),
                   position.get(), work.get(), nullptr, nullptr);
  }

  // gather: rows through `order` (the gate_up use); else rows in sorted order (the down use).
  cuda::MoeGemmParams params(const GemmShape& s, void* out, bool f32, bool gather) const {
    cuda::MoeGemmParams p;
    p.in = reinterpret_cast<const cuda::bf16*>(d_x.get());
    p.order = gather ? order.get() : nullptr;
    p.top_k = 1;
    p.offsets = offsets.get();
    p.w = reinterpret_cast<const cuda::bf16*>(d_w.get());
    p.experts = experts;
    p.n_out = s.n_out;
    p.k = s.k;
    p.out = out;
    p.out_f32 = f32;
    p.work = work.get();
    p.assignments = n;
    return p;
  }
};

TEST(CudaMoeGemm, MatchesNaiveReference) {
  std::mt19937 rng(22);
  // Experts 0 and 6 have no rows; 128 and 129 are one full tile and one past it (the warps of a
  // tile split it at 64 rows); 200 two tiles.
  static_assert(cuda::kMoeTileRows == 128);
  const std::vector<int> counts = {0, 1, 3, 17, 64, 65, 128, 129, 0, 200, 2};
  const int experts = int(counts.size());
  for (const GemmShape s : {GemmShape{1024, 2048}, GemmShape{2048, 512}, GemmShape{40, 72},
                            GemmShape{70, 200}, GemmShape{1, 8}, GemmShape{130, 520}}) {
    SCOPED_TRACE(testing::Message() << "n_out " << s.n_out << " k " << s.k);
    const auto routed = route_by_counts(counts, rng);
    const int n = int(routed.size());
    GemmCase c(routed, test::random_floats(size_t(n) * s.k, rng),
               test::random_floats(size_t(experts) * s.n_out * s.k, rng, 0.2f), experts);
    const auto offsets = test::to_host(c.offsets);
    const auto order = test::to_host(c.order);
    for (int e = 0; e < experts; ++e)
      ASSERT_EQ(offsets[size_t(e + 1)] - offsets[size_t(e)], counts[size_t(e)]);
    for (const bool gather : {true, false}) {
      for (const bool f32 : {true, false}) {
        SCOPED_TRACE(testing::Message() << "gather " << gather << " f32 " << f32);
        cuda::DeviceBuffer<float> y32(size_t(n) * s.n_out, "y");
        cuda::DeviceBuffer<cuda::bf16> y16(size_t(n) * s.n_out, "y");
        void* out = f32 ? static_cast<void*>(y32.get()) : static_cast<void*>(y16.get());
        cuda::moe_grouped_gemm(c.params(s, out, f32, gather), nullptr);
        const auto got = f32 ? test::to_host(y32) : test::bf16_to_floats(test::to_host(y16));
        int bad = 0;
        for (int e = 0; e < experts; ++e)
          for (int a = offsets[size_t(e)]; a < offsets[size_t(e + 1)]; ++a) {
            const int row = gather ? order[size_t(a)] : a;
            for (int col = 0; col < s.n_out; ++col) {
              double dot = 0;
              for (int d = 0; d < s.k; ++d)
                dot +=
                    double(c.x[size_t(row) * s.k + d]) * c.w[(size_t(e) * s.n_out + col) * s.k + d];
              const double tol = 1e-3 * (1 + std::abs(dot)) + (f32 ? 0.0 : 8e-3 * std::abs(dot));
              const float v = got[size_t(a) * s.n_out + col];
              if (!(std::abs(v - dot) <= tol) && bad++ < 5)
                ADD_FAILURE() << "expert " << e << " position " << a << " column " << col << ": "
                              << v << " vs " << dot;
            }
          }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

// The fused SwiGLU gives the bits of the bf16 GEMM over the gate and up halves followed by
// swiglu(): widths below, at and across the kernel's 64-feature column tiles, gathered and sorted.
TEST(CudaMoeGemm, FusedSwigluGivesTheGemmThenSwiglusBits) {
  std::mt19937 rng(23);
  const std::vector<int> counts = {3, 0, 64, 65, 1, 130};
  const int experts = int(counts.size());
  for (const GemmShape s : {GemmShape{2 * 512, 2048}, GemmShape{2 * 40, 72},
                            GemmShape{2 * 100, 200}, GemmShape{2 * 64, 64}}) {
    const int inter = s.n_out / 2;
    SCOPED_TRACE(testing::Message() << "inter " << inter << " k " << s.k);
    const auto routed = route_by_counts(counts, rng);
    const int n = int(routed.size());
    GemmCase c(routed, test::random_floats(size_t(n) * s.k, rng),
               test::random_floats(size_t(experts) * s.n_out * s.k, rng, 0.2f), experts);
    for (const bool gather : {true, false}) {
      SCOPED_TRACE(testing::Message() << "gather " << gather);
      cuda::DeviceBuffer<cuda::bf16> gu(size_t(n) * s.n_out, "gate_up"),
          want(size_t(n) * inter, "want"), got(size_t(n) * inter, "got");
      cuda::moe_grouped_gemm(c.params(s, gu.get(), false, gather), nullptr);
      cuda::swiglu(gu.get(), want.get(), n, inter, nullptr);
      auto p = c.params(s, got.get(), false, gather);
      p.swiglu = true;
      cuda::moe_grouped_gemm(p, nullptr);
      const auto a = test::to_host(want), b = test::to_host(got);
      int differ = 0;
      for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
      EXPECT_EQ(differ, 0) << "of " << a.size() << " values";
    }
  }
}

// The probe token's output row bits when it shares expert 1 with `others` other tokens and sits
// at place `at` among them (experts 0 and 2 have rows of their own around it).
std::vector<uint32_t> probe_output(const GemmShape& s, const std::vector<float>& probe,
                                   const std::vector<float>& w, int others, int at,
                                   std::mt19937& rng) {
  std::vector<int32_t> routed;
  std::vector<float> x;
  auto add = [&](int e, const std::vector<float>& row) {
    routed.push_back(e);
    x.insert(x.end(), row.begin(), row.end());
  };
  for (int i = 0; i < 5; ++i) add(0, test::random_floats(size_t(s.k), rng));
  int probe_token = -1;
  for (int i = 0; i <= others; ++i) {
    if (i == at) {
      probe_token = int(routed.size());
      add(1, probe);
    } else {
      add(1, test::random_floats(size_t(s.k), rng, 3.0f));
    }
    if (i % 4 == 0) add(2, test::random_floats(size_t(s.k), rng));
  }
  GemmCase c(routed, x, w, 3);
  cuda::DeviceBuffer<float> y(size_t(c.n) * s.n_out, "y");
  cuda::moe_grouped_gemm(c.params(s, y.get(), true, true), nullptr);
  const auto got = test::to_host(y);
  const int pos = test::to_host(c.position)[size_t(probe_token)];
  std::vector<uint32_t> bits(size_t(s.n_out));
  std::memcpy(bits.data(), got.data() + size_t(pos) * s.n_out, bits.size() * sizeof(float));
  return bits;
}

TEST(CudaMoeGemm, BatchInvariant) {
  std::mt19937 rng(2222);
  for (const GemmShape s : {GemmShape{1024, 2048}, GemmShape{2048, 512}, GemmShape{70, 200}}) {
    SCOPED_TRACE(testing::Message() << "n_out " << s.n_out << " k " << s.k);
    const auto probe = test::random_floats(size_t(s.k), rng);
    const auto w = test::random_floats(size_t(3) * s.n_out * s.k, rng, 0.2f);
    const auto alone = probe_output(s, probe, w, 0, 0, rng);
    std::vector<int> others(64);
    std::iota(others.begin(), others.end(), 1);
    for (const int extra : {65, 100, 127, 128, 129, 200, 300}) others.push_back(extra);
    for (const int m : others) {
      const int at = int(rng() % uint32_t(m + 1));
      EXPECT_EQ(probe_output(s, probe, w, m, at, rng), alone)
          << m << " other rows, the probe at place " << at;
    }
  }
}

TEST(CudaMoeGemm, RefusesShapesOutsideTheContract) {
  std::mt19937 rng(3);
  const GemmShape s{16, 64};
  GemmCase c({0, 1, 1}, test::random_floats(3 * 64, rng), test::random_floats(2 * 16 * 64, rng), 2);
  cuda::DeviceBuffer<float> y(size_t(3 * 16), "y");
  auto p = c.params(s, y.get(), true, true);
  p.k = 60;  // not a multiple of 8
  EXPECT_THROW(cuda::moe_grouped_gemm(p, nullptr), std::exception);
  p = c.params(s, y.get(), true, true);
  p.n_out = 0;
  EXPECT_THROW(cuda::moe_grouped_gemm(p, nullptr), std::exception);
  p = c.params(s, y.get(), true, true);
  p.in = reinterpret_cast<const cuda::bf16*>(c.d_x.get() + 1);  // rows 2-byte aligned only
  EXPECT_THROW(cuda::moe_grouped_gemm(p, nullptr), std::exception);
  p = c.params(s, y.get(), true, true);
  p.assignments = -1;
  EXPECT_THROW(cuda::moe_grouped_gemm(p, nullptr), std::exception);
  p = c.params(s, y.get(), true, true);
  p.swiglu = true;  // with an fp32 output
  EXPECT_THROW(cuda::moe_grouped_gemm(p, nullptr), std::exception);
  p = c.params(GemmShape{15, 64}, y.get(), false, true);
  p.swiglu = true;  // an odd n_out has no gate and up halves
  EXPECT_THROW(cuda::moe_grouped_gemm(p, nullptr), std::exception);
  p = c.params(s, y.get(), true, true);
  p.work = nullptr;
  EXPECT_THROW(cuda::moe_grouped_gemm(p, nullptr), std::exception);
}

}  // namespace
}  // namespace dllm
