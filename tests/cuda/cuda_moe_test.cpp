// The CUDA MoE kernels: dispatch + grouped GEMM + combine against a naive CPU computation on fresh
// random inputs (experts with no rows, odd sizes), and the router (kernels.h moe_route) against
// the CPU reference (backend/moe_routing.h) on
// fresh random logits of the LLaDA2.0-mini shape (256 experts, 8 groups, top 4 groups, top 8) and
// smaller ones, with exact ties planted: the same experts, in the same order, except where the
// reference's decision is a near-tie that one ulp of the sigmoid can flip; weights to 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <utility>

#include "backend/backend.h"
#include "backend/cuda/kernels.h"
#include "backend/moe_routing.h"
#include "cuda_test_util.h"
#include "model/model.h"
#include "support/decision_trace.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

// Whether token t's routing has a near-tie (gap below `eps`) between two biased scores — the only
// place CPU and GPU may differ (expf vs std::exp in the last bit).
bool near_tie(const std::vector<float>& logits, const std::vector<float>& bias, int experts, int t,
              float eps) {
  std::vector<float> sr(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e)
    sr[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[size_t(t * experts + e)])) + bias[size_t(e)];
  std::sort(sr.begin(), sr.end());
  for (size_t i = 1; i < sr.size(); ++i)
    if (sr[i] != sr[i - 1] && sr[i] - sr[i - 1] < eps) return true;
  return false;
}

TEST(CudaMoeRouter, MatchesTheCpuReference) {
  struct Shape {
    int experts, groups, keep, k;
  };
  for (const Shape s : {Shape{256, 8, 4, 8}, Shape{16, 4, 2, 4}, Shape{64, 1, 1, 6}}) {
    SCOPED_TRACE(s.experts);
    std::mt19937 rng(s.experts + s.k);
    const int n = 333;
    auto logits = test::random_floats(size_t(n * s.experts), rng, 2.0f);
    auto bias = test::random_floats(size_t(s.experts), rng, 0.1f);
    for (int t = 0; t < n; t += 3)  // exact ties inside a token
      for (int j = 0; j < s.experts / 4; ++j)
        logits[size_t(t * s.experts) + rng() % s.experts] =
            logits[size_t(t * s.experts) + rng() % s.experts];
    for (int e = 1; e < s.experts; e += 5) bias[size_t(e)] = bias[size_t(e - 1)];
    MoeConfig m;
    m.num_experts = s.experts;
    m.num_groups = s.groups;
    m.groups_per_token = s.keep;
    m.experts_per_token = s.k;
    m.routed_scaling_factor = 2.5;
    const MoeRouting ref = route_experts(m, logits, n, bias);

    auto d_logits = test::to_device(logits);
    auto d_bias = test::to_device(bias);
    cuda::DeviceBuffer<int32_t> d_experts(size_t(n * s.k), "experts");
    cuda::DeviceBuffer<float> d_weights(size_t(n * s.k), "weights");
    cuda::MoeRouteParams p;
    p.logits = d_logits.get();
    p.expert_bias = d_bias.get();
    p.experts_out = d_experts.get();
    p.weights_out = d_weights.get();
    p.n = n;
    p.experts = s.experts;
    p.groups = s.groups;
    p.groups_per_token = s.keep;
    p.top_k = s.k;
    p.scaling = 2.5f;
    cuda::moe_route(p, nullptr);
    const auto experts = test::to_host(d_experts);
    const auto weights = test::to_host(d_weights);
    int differing = 0;
    for (int t = 0; t < n; ++t) {
      const auto begin = size_t(t * s.k);
      const bool same = std::equal(experts.begin() + begin, experts.begin() + begin + s.k,
                                   ref.experts.begin() + begin);
      if (!same) {
        ++differing;
        EXPECT_TRUE(near_tie(logits, bias, s.experts, t, 1e-6f)) << "token " << t;
        continue;
      }
      for (int j = 0; j < s.k; ++j)
        EXPECT_NEAR(weights[begin + j], ref.weights[begin + j], 1e-5f) << "token " << t;
    }
    EXPECT_LE(differing, n / 50) << "differences must be rare near-ties";
  }
}

// Dispatch, the grouped GEMM and the combine together against a per-token computation: with and
// without the shared expert riding as the extra expert, out accumulated into and not.
TEST(CudaMoe, DispatchGroupedGemmAndCombine) {
  std::mt19937 rng(17);
  const int n = 37, k = 3, experts = 7, h = 72, n_out = 40;
  auto x = test::random_floats(size_t(n * h), rng);  // rounded to bf16 below, in place
  auto w = test::random_floats(size_t(experts * n_out * h), rng, 0.2f);
  auto shared_w = test::random_floats(size_t(n_out * h), rng, 0.2f);
  const auto start = test::random_floats(size_t(n * n_out), rng);
  const auto xb = test::round_bf16(x), wb = test::round_bf16(w), sb = test::round_bf16(shared_w);
  std::vector<int32_t> routed(static_cast<size_t>(n * k));
  for (int t = 0; t < n; ++t) {  // three distinct experts per token: two of 0..4, and 6; 5 never
    routed[size_t(t * k + 0)] = t % 5;
    routed[size_t(t * k + 1)] = (t + 1) % 5;
    routed[size_t(t * k + 2)] = 6;
  }
  const auto weights = test::random_floats(size_t(n * k), rng);
  const auto d_x = test::to_device(xb), d_w = test::to_device(wb), d_shared = test::to_device(sb);
  const auto d_routed = test::to_device(routed);
  const auto d_weights = test::to_device(weights);
  auto dot = [&](int t, const std::vector<float>& wt, int col) {
    double sum = 0;
    for (int d = 0; d < h; ++d) sum += double(x[size_t(t * h + d)]) * wt[size_t(col * h + d)];
    return sum;
  };
  for (const bool extra : {false, true})
    for (const bool accumulate : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "shared expert " << extra << ", accumulate " << accumulate);
      cuda::DeviceBuffer<int32_t> offsets(size_t(experts + 1), "offsets"),
          order(size_t(n * (k + 1)), "order"), position(size_t(n * k), "position"),
          work(size_t(cuda::moe_work_list_ints(n * k, experts, extra ? n : 0)), "work list");
      cuda::moe_sort(d_routed.get(), n, k, 0, experts, extra, offsets.get(), order.get(),
                     position.get(), work.get(), nullptr, nullptr);
      cuda::DeviceBuffer<float> y(size_t(n * (k + 1) * n_out), "y");
      auto out = test::to_device(start);
      cuda::MoeGemmParams p;
      p.in = reinterpret_cast<const cuda::bf16*>(d_x.get());
      p.order = order.get();
      p.top_k = k;
      p.offsets = offsets.get();
      p.work = work.get();
      p.assignments = n * k;
      p.w = reinterpret_cast<const cuda::bf16*>(d_w.get());
      p.experts = experts;
      p.n_out = n_out;
      p.k = h;
      p.extra_w = extra ? reinterpret_cast<const cuda::bf16*>(d_shared.get()) : nullptr;
      p.extra_rows = extra ? n : 0;
      p.out = y.get();
      cuda::moe_grouped_gemm(p, nullptr);
      cuda::moe_combine(y.get(), position.get(), d_weights.get(), n, k, n_out, extra, out.get(),
                        accumulate, nullptr);
      const auto got_offsets = test::to_host(offsets);
      const auto got_position = test::to_host(position);
      const auto got_y = test::to_host(y);
      const auto got = test::to_host(out);
      EXPECT_EQ(got_offsets[0], extra ? n : 0) << "routed positions follow the shared rows";
      EXPECT_EQ(got_offsets[5], got_offsets[6]) << "expert 5 has no rows";
      EXPECT_EQ(got_offsets[size_t(experts)], n * k + (extra ? n : 0));
      std::vector<float> ref(size_t(n * n_out), 0.0f);
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < n_out; ++c) {
          float& r = ref[size_t(t * n_out + c)];
          if (accumulate) r = start[size_t(t * n_out + c)];
          if (extra) {
            const double want = dot(t, shared_w, c);
            EXPECT_NEAR(got_y[size_t(t * n_out + c)], want, 1e-3 * (1 + std::abs(want)));
            r += float(want);
          }
        }
      for (int t = 0; t < n; ++t)
        for (int j = 0; j < k; ++j) {
          const int a = t * k + j, e = routed[size_t(a)], at = got_position[size_t(a)];
          ASSERT_GE(at, got_offsets[size_t(e)]);
          ASSERT_LT(at, got_offsets[size_t(e + 1)]);
          for (int c = 0; c < n_out; ++c) {
            const double want = dot(t, w, e * n_out + c);
            EXPECT_NEAR(got_y[size_t(at * n_out + c)], want, 1e-3 * (1 + std::abs(want)));
            ref[size_t(t * n_out + c)] += weights[size_t(a)] * float(want);
          }
        }
      EXPECT_LT(test::rel_error(got, ref), 1e-4);
    }
}

// moe_sort against a CPU stable counting sort, exactly: offsets, order (an expert's assignments
// in assignment order), position and the grouped GEMM's work list (each expert's tiles of
// sorted rows, the count of experts with rows), in one block and over several — uniform and
// skewed routings (one expert taking most rows, most experts empty), from 1 to 32768
// assignments, 1 to 1024 experts; all experts held, the upper half held (an expert-parallel
// rank: the others' assignments get position -1 and no sorted slot), and the shared expert first.
TEST(CudaMoe, SortIsAStableCountingSort) {
  struct Shape {
    int n, top_k, experts;
    bool skewed;
  };
  std::mt19937 rng(99);
  for (const Shape s :
       {Shape{1024, 8, 256, false}, Shape{1024, 8, 256, true}, Shape{1, 8, 256, false},
        Shape{37, 3, 1024, false}, Shape{300, 4, 1024, true}, Shape{50, 2, 7, false},
        Shape{33, 1, 1, false}, Shape{4096, 8, 256, true}, Shape{1111, 7, 300, false}}) {
    const int a_total = s.n * s.top_k;
    std::vector<int32_t> routed(static_cast<size_t>(a_total));
    for (int32_t& e : routed)
      e = s.skewed && rng() % 2 == 0 ? 3 % s.experts : int32_t(rng() % uint32_t(s.experts));
    for (const auto [first, extra] :
         {std::pair{0, false}, std::pair{s.experts / 2, false}, std::pair{0, s.experts < 1024}}) {
      const int held = s.experts - first, extra_rows = extra ? s.n : 0;
      SCOPED_TRACE(testing::Message()
                   << s.n << " tokens x " << s.top_k << " of " << s.experts << ", holding " << first
                   << ".." << s.experts - 1 << (extra ? ", the shared expert first" : ""));
      std::vector<int32_t> offsets(size_t(held + 1), 0), order, position(routed.size(), -1),
          work{0, 0};
      for (int t = 0; t < extra_rows; ++t) order.push_back(t * s.top_k);
      for (int t = 0; t * cuda::kMoeTileRows < extra_rows; ++t) work.push_back(held | t << 10);
      offsets[0] = extra_rows;
      for (int32_t e : routed)
        if (e >= first) ++offsets[size_t(e - first + 1)];
      for (int e = 0; e < held; ++e) {
        const int rows = offsets[size_t(e + 1)];
        work[1] += rows > 0;
        for (int t = 0; t * cuda::kMoeTileRows < rows; ++t) work.push_back(e | t << 10);
        offsets[size_t(e + 1)] += offsets[size_t(e)];
      }
      work[0] = int32_t(work.size() - 2);
      for (int e = first; e < s.experts; ++e)
        for (int a = 0; a < a_total; ++a)
          if (routed[size_t(a)] == e) {
            position[size_t(a)] = int32_t(order.size());
            order.push_back(a);
          }
      auto d_routed = test::to_device(routed);
      for (const bool blocks : {false, true}) {  // one block; several where there are enough
        SCOPED_TRACE(blocks ? "with scratch" : "one block");
        cuda::DeviceBuffer<int32_t> d_offsets(offsets.size(), "offsets"),
            d_order(routed.size() + size_t(extra_rows), "order"),
            d_position(position.size(), "position"),
            d_work(size_t(cuda::moe_work_list_ints(a_total, held, extra_rows)), "work list"),
            d_scratch(size_t(cuda::moe_sort_scratch_ints(a_total, held)), "scratch");
        ASSERT_LE(work.size(), d_work.size());
        cuda::moe_sort(d_routed.get(), s.n, s.top_k, first, held, extra, d_offsets.get(),
                       d_order.get(), d_position.get(), d_work.get(),
                       blocks ? d_scratch.get() : nullptr, nullptr);
        EXPECT_EQ(test::to_host(d_offsets), offsets);
        auto got_order = test::to_host(d_order);
        got_order.resize(order.size());  // past the held experts' assignments: unwritten
        EXPECT_EQ(got_order, order);
        EXPECT_EQ(test::to_host(d_position), position);
        auto got_work = test::to_host(d_work);
        got_work.resize(work.size());
        EXPECT_EQ(got_work, work);
      }
    }
  }
}

// The whole model's routing (SequenceForward::want_routing): a 48-token prefill and a block of 8
// over it on the llada2-tiny fixture route every row of every MoE layer to the CPU's experts,
// except where the CPU's own closest routing call is a near-tie (the GPU's bf16 activations
// against the CPU's fp32 may flip only those). A flip changes what the later layers see, so
// the rows held to the bound are those routed apart in the first layer where any was.
TEST(CudaMoe, ForwardRoutesRowsAsTheCpuExceptAtNearTies) {
  const auto model = Model::load(test::model_fixture("llada2-tiny"));
  auto cpu = make_cpu_backend(*model);
  auto gpu = make_cuda_backend(*model);
  const int64_t k = model->config().moe.experts_per_token;
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(48);
  for (int32_t& t : prompt) t = int32_t(rng() % 280);
  auto cache_c = cpu->create_cache(64), cache_g = gpu->create_cache(64);
  const auto run = [&](Backend& b, KvCache& cache, std::vector<int32_t> tokens, int32_t first,
                       CacheWrite write) {
    SequenceForward f;
    f.cache = &cache;
    f.tokens = std::move(tokens);
    f.positions.resize(f.tokens.size());
    std::iota(f.positions.begin(), f.positions.end(), first);
    f.rule = AttentionRule::block_causal(8);
    f.write = write;
    f.want_routing = true;
    return b.forward(std::span(&f, 1))[0];
  };
  int rows = 0, apart = 0;
  for (int step = 0; step < 2; ++step) {
    const std::vector<int32_t> block = {7, 99, 290, 290, 290, 290, 12, 3};
    const auto c = step == 0 ? run(*cpu, *cache_c, prompt, 0, CacheWrite::kAppend)
                             : run(*cpu, *cache_c, block, 48, CacheWrite::kNone);
    const auto g = step == 0 ? run(*gpu, *cache_g, prompt, 0, CacheWrite::kAppend)
                             : run(*gpu, *cache_g, block, 48, CacheWrite::kNone);
    ASSERT_FALSE(c.routing_gaps.empty());
    ASSERT_EQ(g.routing_gaps.size(), c.routing_gaps.size());
    ASSERT_EQ(g.routed_experts.size(), c.routing_gaps.size() * size_t(k));
    ASSERT_EQ(c.routed_experts.size(), g.routed_experts.size());
    rows += int(c.routing_gaps.size());
    const size_t per_layer = step == 0 ? prompt.size() : 8;  // the forward's rows
    std::optional<size_t> first_layer;
    for (size_t t = 0; t < c.routing_gaps.size(); ++t) {
      if (std::equal(c.routed_experts.begin() + t * k, c.routed_experts.begin() + (t + 1) * k,
                     g.routed_experts.begin() + t * k))
        continue;
      if (!first_layer) first_layer = t / per_layer;
      if (t / per_layer != *first_layer) break;  // later layers may follow from its flips
      ++apart;
      std::printf("  forward %d: MoE layer %zu row %zu routed apart, CPU routing gap %.4f\n", step,
                  t / per_layer, t % per_layer, c.routing_gaps[t]);
      EXPECT_LT(c.routing_gaps[t], test::kNearTie) << "forward " << step << ", routed row " << t;
    }
  }
  std::printf("  %d routed rows, %d routed apart where they first part\n", rows, apart);
}

TEST(CudaMoeRouter, UnsupportedShapeIsAnError) {
  cuda::MoeRouteParams p;
  p.experts = 1024;
  p.top_k = 8;
  EXPECT_THROW(cuda::moe_route(p, nullptr), std::exception);
}

}  // namespace
}  // namespace dllm
