// The CUDA sparse prefill kernel (backend/cuda/sparse_prefill.cu) against masked dense attention
// on the host: for every pattern (A-shape, tri-shape, vertical-slash, block-sparse, grid,
// Q-boundary and dense), causal and block-causal (B = 4), ragged lengths, GQA, head_dim 16, 32, 64
// and 128, the output of the plan's kernel equals fp32 softmax attention over the plan's mask
// (plan_mask, whose equality with an independent reference tests/attention/sparse_prefill_test.cpp
// checks) on the same bf16-rounded inputs, relative L2 error <= 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "attention/sparse_prefill_patterns.h"
#include "backend/cuda/sparse_prefill.h"
#include "cuda_test_util.h"

namespace dllm {
namespace {

struct Shape {
  int n, heads, kv_heads, d, block_size;
};

// Modality segments of 3..60 tokens, text / image / video at random.
std::vector<uint8_t> short_segments(int n, std::mt19937& rng) {
  std::vector<uint8_t> m;
  std::uniform_int_distribution<int> kind(0, 2), len(3, 60);
  while (static_cast<int>(m.size()) < n)
    m.insert(m.end(), len(rng), static_cast<uint8_t>(kind(rng)));
  m.resize(n);
  return m;
}

std::vector<float> masked_dense(const SparsePrefillPlan& plan, const std::vector<float>& q,
                                const std::vector<float>& k, const std::vector<float>& v,
                                const Shape& s) {
  std::vector<float> out(q.size(), 0.0f);
  const int group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  std::vector<double> p(s.n);
  for (int h = 0; h < s.heads; ++h) {
    const std::vector<uint8_t> mask = plan_mask(plan, h);
    const int g = h / group;
    for (int r = 0; r < s.n; ++r) {
      double mx = -INFINITY, sum = 0;
      for (int c = 0; c < s.n; ++c) {
        if (!mask[size_t(r) * s.n + c]) continue;
        double dot = 0;
        for (int i = 0; i < s.d; ++i)
          dot += double(q[(size_t(r) * s.heads + h) * s.d + i]) *
                 k[(size_t(c) * s.kv_heads + g) * s.d + i];
        p[c] = dot * scale;
        mx = std::max(mx, p[c]);
      }
      for (int c = 0; c < s.n; ++c)
        if (mask[size_t(r) * s.n + c]) sum += (p[c] = std::exp(p[c] - mx));
      for (int c = 0; c < s.n; ++c) {
        if (!mask[size_t(r) * s.n + c]) continue;
        for (int i = 0; i < s.d; ++i)
          out[(size_t(r) * s.heads + h) * s.d + i] +=
              static_cast<float>(p[c] / sum * v[(size_t(c) * s.kv_heads + g) * s.d + i]);
      }
    }
  }
  return out;
}

// through_slots: K/V rows scattered over a larger pool by a random permutation and read through
// the key_slots map (the forward's paged pool).
void check_pattern(const HeadPattern& pattern, const Shape& s, uint32_t seed,
                   bool through_slots = false) {
  SCOPED_TRACE("pattern " + to_string(pattern.kind) +
               (pattern.boundary == BoundaryKind::kQ ? "+q_boundary" : "") + " n " +
               std::to_string(s.n) + " d " + std::to_string(s.d) + " B " +
               std::to_string(s.block_size));
  std::mt19937 rng(seed);
  std::vector<float> q = test::random_floats(size_t(s.n) * s.heads * s.d, rng);
  std::vector<float> k = test::random_floats(size_t(s.n) * s.kv_heads * s.d, rng);
  std::vector<float> v = test::random_floats(size_t(s.n) * s.kv_heads * s.d, rng);
  const auto qb = test::round_bf16(q), kb = test::round_bf16(k), vb = test::round_bf16(v);
  PrefillLayout layout;
  layout.n_tokens = s.n;
  layout.block_size = s.block_size;
  layout.modality = short_segments(s.n, rng);
  layout.vision_begin = s.n / 10;
  layout.vision_end = s.n - s.n / 12;
  SparsePrefillPlan plan;
  plan.n_tokens = s.n;
  plan.block_size = s.block_size;
  for (int h = 0; h < s.heads; ++h) {
    HeadQK qk{q.data() + h * s.d, k.data() + (h / (s.heads / s.kv_heads)) * s.d,
              int64_t(s.heads) * s.d, int64_t(s.kv_heads) * s.d, s.d};
    plan.heads.push_back(build_head_plan(pattern, layout, qk));
  }
  const std::vector<float> ref = masked_dense(plan, q, k, v, s);
  const cuda::DeviceSparsePlan dplan = cuda::upload_sparse_plan(plan);
  std::vector<int32_t> slots;
  std::vector<uint16_t> kp = kb, vp = vb;
  if (through_slots) {
    const size_t row = size_t(s.kv_heads) * s.d, pool = size_t(s.n) + 37;
    std::vector<int32_t> perm(pool);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    slots.assign(perm.begin(), perm.begin() + s.n);
    kp.assign(pool * row, 0x7fc0);  // NaN in the rows no key maps to
    vp.assign(pool * row, 0x7fc0);
    for (int c = 0; c < s.n; ++c) {
      std::copy_n(&kb[size_t(c) * row], row, &kp[size_t(slots[c]) * row]);
      std::copy_n(&vb[size_t(c) * row], row, &vp[size_t(slots[c]) * row]);
    }
  }
  auto dq = test::to_device(qb), dk = test::to_device(kp), dv = test::to_device(vp);
  auto dslots = test::to_device(through_slots ? slots : std::vector<int32_t>{0});
  cuda::DeviceBuffer<cuda::bf16> dout(q.size(), "output");
  cuda::sparse_prefill_attention(dplan, reinterpret_cast<const cuda::bf16*>(dq.get()),
                                 reinterpret_cast<const cuda::bf16*>(dk.get()),
                                 reinterpret_cast<const cuda::bf16*>(dv.get()), s.heads, s.kv_heads,
                                 s.d, dout.get(), nullptr, through_slots ? dslots.get() : nullptr);
  const std::vector<float> got = test::bf16_to_floats(test::to_host(dout));
  EXPECT_LE(test::rel_error(got, ref), 1e-2);
}

std::vector<HeadPattern> all_patterns() {
  std::vector<HeadPattern> ps;
  HeadPattern p;
  p.kind = PatternKind::kDense;
  ps.push_back(p);
  p.kind = PatternKind::kAShape;
  p.sink = 64;
  p.local = 256;
  ps.push_back(p);
  p.kind = PatternKind::kTriShape;
  p.n_last = 100;
  ps.push_back(p);
  p.kind = PatternKind::kVerticalSlash;
  p.vertical = 100;
  p.slash = 300;
  ps.push_back(p);
  p.kind = PatternKind::kBlockSparse;
  p.top_blocks = 4;
  ps.push_back(p);
  p.kind = PatternKind::kGrid;
  p.grid = {49, 7, true, true, 128};
  ps.push_back(p);
  p.grid = {0, 0, false, true, 100};  // stride and phase searched online
  ps.push_back(p);
  p.kind = PatternKind::kVerticalSlash;
  p.boundary = BoundaryKind::kQ;
  p.vertical = 60;
  p.slash = 200;
  ps.push_back(p);
  p.boundary = BoundaryKind::k2D;
  ps.push_back(p);
  return ps;
}

TEST(CudaSparsePrefill, EveryPatternEqualsMaskedDenseCausal) {
  uint32_t seed = 1;
  for (const HeadPattern& p : all_patterns()) check_pattern(p, {1337, 4, 2, 128, 1}, seed++);
}

TEST(CudaSparsePrefill, EveryPatternEqualsMaskedDenseBlockCausal) {
  uint32_t seed = 100;
  for (const HeadPattern& p : all_patterns()) check_pattern(p, {1203, 4, 4, 128, 4}, seed++);
}

TEST(CudaSparsePrefill, HeadDim64AndShortRaggedSequences) {
  uint32_t seed = 200;
  // Odd lengths causal, even ones block-causal (B = 4).
  for (const HeadPattern& p : all_patterns())
    for (int n : {1, 64, 65, 778}) check_pattern(p, {n, 6, 3, 64, n % 2 ? 1 : 4}, seed++);
}

// The embedded models' and the forward fixtures' head sizes (cuda_sparse_prefill_forward_test).
TEST(CudaSparsePrefill, HeadDim32And16) {
  uint32_t seed = 300;
  for (const HeadPattern& p : all_patterns())
    for (int head_dim : {32, 16})
      check_pattern(p, {403, 4, 2, head_dim, head_dim == 32 ? 4 : 1}, seed++);
}

// K/V read through a slot map (the CUDA forward's pool), causal and block-causal.
TEST(CudaSparsePrefill, KeysThroughPoolSlots) {
  uint32_t seed = 400;
  for (const HeadPattern& p : all_patterns())
    for (int block : {1, 4}) check_pattern(p, {517, 4, 2, 128, block}, seed++, true);
}

TEST(CudaSparsePrefill, RejectsBadArguments) {
  SparsePrefillPlan plan;
  plan.n_tokens = 1;
  plan.heads.resize(2);
  for (auto& h : plan.heads) {
    h.open_tile();
    h.add_row(0);
    h.add_span({0, 1, 1, 0, -1});
  }
  const cuda::DeviceSparsePlan d = cuda::upload_sparse_plan(plan);
  cuda::DeviceBuffer<cuda::bf16> x(2 * 96, "x");
  EXPECT_THROW(
      cuda::sparse_prefill_attention(d, x.get(), x.get(), x.get(), 2, 1, 96, x.get(), nullptr),
      Error);
  EXPECT_THROW(
      cuda::sparse_prefill_attention(d, x.get(), x.get(), x.get(), 3, 1, 64, x.get(), nullptr),
      Error);
}

}  // namespace
}  // namespace dllm
