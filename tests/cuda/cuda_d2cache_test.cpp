// d2Cache on the CUDA backend: the head-averaged attention-rows kernel against a naive host
// computation, and selected-row (write-at-slots) forwards with attention rows against the CPU
// backend on the full-diffusion fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "backend/backend.h"
#include "cuda_test_util.h"
#include "decode/d2cache_selection.h"
#include "decode/decoder.h"
#include "io/json_file.h"
#include "support/decision_trace.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

struct RowsShape {
  int n_q, heads, kv_heads, hd, capacity, n_keys;
  bool slot_list;  // keys through a shuffled slot list, else slots 0..n_keys-1
};

// Shapes cover GQA groups 1 (LLaDA), 4, 7 (Dream) and 32 (> 16 score rows: heads split into
// chunks), head_dim 16/32/64/128 (the tiny fixtures use 16), partial tiles of query rows, and a
// long key list (fewer score rows per block so the scores fit in shared memory).
TEST(CudaD2Cache, AttentionRowsKernelMatchesNaive) {
  const RowsShape shapes[] = {
      {5, 8, 2, 64, 700, 600, true},     {37, 32, 32, 128, 800, 768, true},
      {3, 28, 4, 128, 300, 300, false},  {1, 32, 1, 128, 100, 97, true},
      {18, 16, 4, 64, 4000, 3999, true}, {2, 8, 8, 128, 9000, 9000, false},
      {7, 4, 2, 16, 50, 45, true},       {3, 4, 4, 32, 64, 64, false},
  };
  std::mt19937 rng(17);
  for (const RowsShape& sh : shapes) {
    SCOPED_TRACE("n_q " + std::to_string(sh.n_q) + " heads " + std::to_string(sh.heads) + "/" +
                 std::to_string(sh.kv_heads) + " hd " + std::to_string(sh.hd) + " keys " +
                 std::to_string(sh.n_keys));
    const int n_q = sh.n_q, heads = sh.heads, kv_heads = sh.kv_heads, hd = sh.hd;
    const int capacity = sh.capacity, n_keys = sh.n_keys;
    // Scores of a few units so that the softmax is far from uniform.
    auto qf = test::random_floats(size_t(n_q) * heads * hd, rng, 3.0f);
    auto kf = test::random_floats(size_t(capacity) * kv_heads * hd, rng);
    const auto qb = test::round_bf16(qf);  // qf, kf now hold exactly the bf16 values
    const auto kb = test::round_bf16(kf);
    std::vector<int32_t> slots(capacity);
    std::iota(slots.begin(), slots.end(), 0);
    if (sh.slot_list) std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(n_keys);
    const int width = *std::max_element(slots.begin(), slots.end()) + 1;
    auto dq = test::to_device(qb);
    auto dk = test::to_device(kb);
    auto ds = test::to_device(slots);
    cuda::DeviceBuffer<float> out(size_t(n_q) * width, "test output");
    cuda::DeviceBuffer<float> ws(
        std::max<size_t>(1, cuda::attention_rows_workspace_floats(n_q, n_keys, heads, kv_heads)),
        "test workspace");
    DLLM_CUDA_CHECK(cudaMemset(out.get(), 0, out.size() * sizeof(float)));
    cuda::AttentionRowsParams p;
    p.q = reinterpret_cast<const cuda::bf16*>(dq.get());
    p.k_cache = reinterpret_cast<const cuda::bf16*>(dk.get());
    p.key_slots = sh.slot_list ? ds.get() : nullptr;
    p.n_q = n_q;
    p.n_keys = n_keys;
    p.heads = heads;
    p.kv_heads = kv_heads;
    p.head_dim = hd;
    p.width = width;
    p.scale = 1.0f / std::sqrt(float(hd));
    p.out = out.get();
    p.workspace = ws.get();
    cuda::attention_rows(p, nullptr);
    const auto got = test::to_host(out);

    std::vector<double> want(got.size(), 0.0);
    for (int i = 0; i < n_q; ++i)
      for (int h = 0; h < heads; ++h) {
        const int g = h / (heads / kv_heads);
        std::vector<double> s(n_keys);
        double mx = -1e300, sum = 0;
        for (int j = 0; j < n_keys; ++j) {
          double dot = 0;
          for (int d = 0; d < hd; ++d)
            dot += double(qf[(size_t(i) * heads + h) * hd + d]) *
                   kf[(size_t(slots[j]) * kv_heads + g) * hd + d];
          s[j] = dot * p.scale;
          mx = std::max(mx, s[j]);
        }
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int j = 0; j < n_keys; ++j) want[size_t(i) * width + slots[j]] += s[j] / sum / heads;
      }
    // Relative to the largest probability (rows sum to 1; unused columns must stay exactly 0).
    double max_err = 0, max_want = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
      max_want = std::max(max_want, want[i]);
      if (want[i] == 0.0) ASSERT_EQ(got[i], 0.0f) << "column " << i % width << " is not a key";
    }
    EXPECT_LT(max_err, 1e-4 * max_want);
    for (int i = 0; i < n_q; ++i) {
      double row = 0;
      for (int j = 0; j < width; ++j) row += got[size_t(i) * width + j];
      EXPECT_NEAR(row, 1.0, 1e-3) << "row " << i;
    }
  }
}

// Step 0 over the whole canvas, then a scattered subset refreshed in place: rows and logits as on
// the CPU backend (bf16 storage on the GPU).
TEST(CudaD2Cache, SelectedRowForwardWithAttentionRowsMatchesCpu) {
  for (const char* name : {"llada-tiny", "dream-tiny"}) {
    SCOPED_TRACE(name);
    auto model = Model::load(test::model_fixture(name));
    auto gpu = make_cuda_backend(*model);
    auto cpu = make_cpu_backend(*model);
    const int32_t mask = static_cast<int32_t>(model->config().mask_token_id);
    const std::vector<int32_t> ids = {3, 99, 17, 250, 5, mask, mask, 8, mask, mask, mask, 41};
    const int32_t n = static_cast<int32_t>(ids.size());
    auto gc = gpu->create_cache(n);
    auto cc = cpu->create_cache(n);
    auto make = [&](const std::vector<int32_t>& rows, KvCache* cache, bool first) {
      SequenceForward f;
      for (int32_t r : rows) {
        f.tokens.push_back(ids[size_t(r)]);
        f.positions.push_back(r);
      }
      f.cache = cache;
      f.rule = AttentionRule::bidirectional();
      f.write = first ? CacheWrite::kAppend : CacheWrite::kAtSlots;
      if (!first) f.write_slots = rows;
      f.want_logits = true;
      f.want_attention_rows = true;
      f.want_attention_rollout = true;
      f.output_rows.resize(rows.size());
      std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
      return f;
    };
    std::vector<int32_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    for (const auto& rows : {all, std::vector<int32_t>{9, 1, 5, 11}}) {
      const bool first = rows.size() == all.size();
      auto fg = make(rows, gc.get(), first);
      auto fc = make(rows, cc.get(), first);
      const auto g = gpu->forward(std::span(&fg, 1))[0];
      const auto c = cpu->forward(std::span(&fc, 1))[0];
      EXPECT_LE(test::rel_error(g.logits, c.logits), 1e-2);
      ASSERT_EQ(g.attention_width, c.attention_width);
      ASSERT_EQ(g.attention_rows.size(), c.attention_rows.size());
      double max_err = 0;
      for (size_t i = 0; i < c.attention_rows.size(); ++i)
        max_err = std::max(max_err, std::fabs(double(g.attention_rows[i]) - c.attention_rows[i]));
      EXPECT_LT(max_err, 2e-2);
      // The device rollout equals the host reference on the device's own rows, and the CPU's
      // within bf16 noise.
      const auto ref = d2cache::rollout_importance(g.attention_rows, model->config().num_layers,
                                                   rows, g.attention_width);
      ASSERT_EQ(g.attention_importance.size(), ref.size());
      ASSERT_EQ(c.attention_importance.size(), ref.size());
      double scale = 0, err_ref = 0, err_cpu = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        scale = std::max(scale, std::fabs(ref[i]));
        err_ref = std::max(err_ref, std::fabs(g.attention_importance[i] - ref[i]));
        err_cpu =
            std::max(err_cpu, std::fabs(g.attention_importance[i] - c.attention_importance[i]));
      }
      EXPECT_LT(err_ref, 1e-5 * scale);
      EXPECT_LT(err_cpu, 3e-2 * scale);
    }
  }
}

}  // namespace
}  // namespace dllm

namespace dllm {
namespace {

// Where a cached strategy's GPU run leaves the CPU's after a forward whose numbers both made,
// those numbers must agree to rounding (probabilities of tokens chosen alike, and d2Cache's
// rollout importance, within test::kSameForward relative): a decision that flips between runs
// whose inputs agree to rounding was a near-tie. d2Cache's decisions rank confidence x certainty
// density (and a nucleus of importance), so the confidences' own closest margin is printed, not
// bounded. Not shown: a dLLM-Cache step that reuses features picks the rows it refreshes inside
// the forward by value similarity (similarity_reuse), a choice neither run reports, so a row the
// runs refreshed differently may differ beyond rounding there; printed only.
void expect_parted_at_rounding(const std::string& what, const SequenceResult& gpu,
                               const SequenceResult& cpu, const DecodeParams& d,
                               bool similarity_reuse) {
  const double stats = test::stats_disagreement(gpu.stats, cpu.stats);
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(gpu.attention_importance.size(), cpu.attention_importance.size());
       ++i) {
    num += std::pow(gpu.attention_importance[i] - cpu.attention_importance[i], 2);
    den += std::pow(cpu.attention_importance[i], 2);
  }
  const double importance = den > 0 ? std::sqrt(num / den) : 0;
  std::printf(
      "  %s; probabilities where alike %.2e, rollout importance %.2e (relative), closest "
      "confidence margin %.4f%s\n",
      what.c_str(), stats, importance, test::closest_decision_margin(cpu.stats, d),
      similarity_reuse ? " (a dLLM-Cache similarity-reuse step: not bounded)" : "");
  EXPECT_EQ(gpu.attention_importance.size(), cpu.attention_importance.size()) << what;
  EXPECT_LT(importance, test::kSameForward) << what;
  if (similarity_reuse) return;
  EXPECT_LT(stats, test::kSameForward) << what;
}

// The d2Cache and Fast-dLLM v1 fixture cases (tools/reference_d2cache.py) decoded on both
// backends in lockstep. bf16 storage flips near-ties of the random tiny models' flat
// distributions (and of the rollout nucleus), so a share of trajectories may part, each at a
// forward whose numbers agree to rounding (expect_parted_at_rounding); the rest must match to
// the end.
TEST(CudaD2Cache, CachedStrategiesTrackTheCpu) {
  int cases = 0, identical = 0;
  for (const char* name : {"llada-tiny-d2cache", "dream-tiny-d2cache"}) {
    const auto fx =
        read_json_file(test::fixtures_dir() / "trajectories" / (std::string(name) + ".json"));
    auto model = Model::load(test::model_fixture(fx["model"]));
    auto gpu = make_cuda_backend(*model);
    auto cpu = make_cpu_backend(*model);
    for (const auto& c : fx["cases"]) {
      const auto& p = c["params"];
      SCOPED_TRACE(name + std::string(" ") + c["name"].get<std::string>());
      DecodeParams d;
      d.strategy = p["strategy"];
      d.max_tokens = p["max_tokens"];
      d.block_length = p["block_length"];
      d.steps = p["steps"];
      d.threshold = p["threshold"];
      d.cache = p["cache"];
      d.d2c_k = p["d2c_k"];
      d.d2c_sigma = p["d2c_sigma"];
      d.d2c_p = p["d2c_p"];
      d.d2c_inflate = p["d2c_inflate"];
      d.d2c_frozen_conf = p["d2c_frozen_conf"];
      d.d2c_select_all = p["d2c_select_all"];
      d.dlc_kp = p["dlc_kp"];
      d.dlc_kr = p["dlc_kr"];
      d.dlc_rho = p["dlc_rho"];
      const auto prompt = c["prompt"].get<std::vector<int32_t>>();
      d = resolve_decode_params(model->config(), d, int64_t(prompt.size()));
      auto dc = make_decoder(model->config(), d, prompt),
           dg = make_decoder(model->config(), d, prompt);
      auto kc = cpu->create_cache(dc->cache_capacity()),
           kg = gpu->create_cache(dg->cache_capacity());
      auto sc = cpu->create_method_state(), sg = gpu->create_method_state();
      ++cases;
      bool same = true;
      SequenceResult last_c, last_g;  // the previous forward's results
      const std::string what = name + std::string(" ") + c["name"].get<std::string>();
      for (int step = 0; step < 200; ++step) {
        SequenceForward fc, fg;
        fc.cache = kc.get();
        fg.cache = kg.get();
        fc.state = sc.get();
        fg.state = sg.get();
        const bool more = dc->plan(fc);
        ASSERT_EQ(more, dg->plan(fg));
        if (!more) break;
        if (fc.tokens != fg.tokens || fc.positions != fg.positions) {
          same = false;
          ASSERT_GT(step, 0) << "the first forward's rows come from the prompt alone";
          expect_parted_at_rounding(what + ": rows part at forward " + std::to_string(step), last_g,
                                    last_c, d, false);
          break;
        }
        SequenceResult rc = cpu->forward(std::span(&fc, 1))[0];
        SequenceResult rg = gpu->forward(std::span(&fg, 1))[0];
        dc->observe(rc);
        dg->observe(rg);
        if (dc->canvas() != dg->canvas()) {
          same = false;
          const bool similarity_reuse =
              fc.dllm_cache && !fc.dllm_cache->refresh_response && fc.dllm_cache->rho > 0;
          expect_parted_at_rounding(what + ": tokens part at forward " + std::to_string(step), rg,
                                    rc, d, similarity_reuse);
          break;
        }
        last_c = std::move(rc);
        last_g = std::move(rg);
      }
      identical += same ? 1 : 0;
    }
  }
  std::printf("  cached-strategy GPU trajectories identical to CPU: %d of %d\n", identical, cases);
  EXPECT_GE(cases, 40);
  EXPECT_GE(identical * 10, cases * 3);
}

}  // namespace
}  // namespace dllm

namespace dllm {
namespace {

// dLLM-Cache steps (first forward, a response refresh, a value-similarity step, a prompt
// refresh) on both backends: logits within bf16 tolerance of the CPU's at every step.
TEST(CudaDllmCache, StepsMatchTheCpu) {
  for (const char* name : {"llada-tiny", "dream-tiny"}) {
    SCOPED_TRACE(name);
    auto model = Model::load(test::model_fixture(name));
    auto gpu = make_cuda_backend(*model);
    auto cpu = make_cpu_backend(*model);
    const int32_t mask = static_cast<int32_t>(model->config().mask_token_id);
    std::vector<int32_t> ids = {3, 99, 17, 250, 5, mask, mask, 8, mask, mask, mask, 41, mask, mask};
    const int32_t n = static_cast<int32_t>(ids.size());
    auto gc = gpu->create_cache(n);
    auto cc = cpu->create_cache(n);
    auto gs = gpu->create_method_state(), cs = cpu->create_method_state();
    struct Step {
      bool prompt, response;
      float rho;
    };
    const Step steps[] = {{true, true, 0.25f},   {false, true, 0.25f}, {false, false, 0.5f},
                          {false, false, 0.25f}, {true, false, 0.0f},  {false, false, 1.0f}};
    int k = 0;
    for (const Step& st : steps) {
      SCOPED_TRACE("step " + std::to_string(k));
      ids[static_cast<size_t>(5 + k)] = 40 + k;  // the canvas changes between steps
      ++k;
      auto make = [&](KvCache* cache, MethodState* state) {
        SequenceForward f;
        f.cache = cache;
        f.state = state;
        f.tokens = ids;
        f.positions.resize(ids.size());
        std::iota(f.positions.begin(), f.positions.end(), 0);
        f.rule = AttentionRule::bidirectional();
        f.dllm_cache = DllmCacheStep{5, st.prompt, st.response, st.rho};
        f.want_logits = true;
        f.output_rows.resize(ids.size());
        std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
        return f;
      };
      auto fg = make(gc.get(), gs.get());
      auto fc = make(cc.get(), cs.get());
      const auto g = gpu->forward(std::span(&fg, 1))[0];
      const auto c = cpu->forward(std::span(&fc, 1))[0];
      ASSERT_EQ(g.logits.size(), c.logits.size());
      EXPECT_LE(test::rel_error(g.logits, c.logits), 2e-2);
    }
    EXPECT_EQ(gc->length(), n);
  }
}

TEST(CudaDllmCache, KernelsMatchNaive) {
  std::mt19937 rng(23);
  const int m = 5, dim = 70, rows_total = 9;
  const std::vector<int32_t> rows = {7, 0, 3, 8, 4};
  auto src = test::random_floats(size_t(m) * dim, rng);
  auto dst0 = test::random_floats(size_t(rows_total) * dim, rng);
  auto d_src = test::to_device(src);
  auto d_rows = test::to_device(rows);
  auto d_dst = test::to_device(dst0);
  cuda::scatter_rows(d_src.get(), d_rows.get(), d_dst.get(), m, dim, nullptr);
  auto want = dst0;
  for (int i = 0; i < m; ++i)
    std::copy_n(&src[size_t(i) * dim], dim, &want[size_t(rows[size_t(i)]) * dim]);
  EXPECT_EQ(test::to_host(d_dst), want);

  auto a = test::random_floats(size_t(rows_total) * dim, rng);
  auto d_a = test::to_device(a);
  cuda::add_inplace(d_dst.get(), d_a.get(), int64_t(rows_total) * dim, nullptr);
  for (size_t i = 0; i < want.size(); ++i) want[i] += a[i];
  EXPECT_EQ(test::to_host(d_dst), want);

  // add_rows: x[rows[i]] += src[i].
  cuda::add_rows(d_src.get(), d_rows.get(), d_dst.get(), m, dim, nullptr);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < dim; ++j)
      want[size_t(rows[size_t(i)] * dim + j)] += src[size_t(i * dim + j)];
  EXPECT_EQ(test::to_host(d_dst), want);

  // Value similarity: cosine of (v_new + bias) against the cached bf16 rows, then the cache
  // holds bf16(v_new + bias). Row 2 is the cached row itself (similarity 1), row 3 its negation.
  const int g = 4, kvd = 96;
  auto v_new = test::random_floats(size_t(g) * kvd, rng);
  auto bias = test::random_floats(kvd, rng, 0.1f);
  auto cached = test::random_floats(size_t(g) * kvd, rng);
  for (int i = 0; i < kvd; ++i) {
    v_new[size_t(2 * kvd + i)] = cached[size_t(2 * kvd + i)] - bias[size_t(i)];
    v_new[size_t(3 * kvd + i)] = -cached[size_t(3 * kvd + i)] - bias[size_t(i)];
  }
  const auto cached_bits = test::round_bf16(cached);
  auto d_v = test::to_device(v_new);
  auto d_bias = test::to_device(bias);
  auto d_cache = test::to_device(cached_bits);
  cuda::DeviceBuffer<float> d_sim(g, "sim");
  // Row r's cached V sits at pool slot slots[r] (not in row order).
  const std::vector<int32_t> slots = {2, 0, 3, 1};
  auto d_slots = test::to_device(slots);
  std::vector<float> pool(cached.size());
  for (int r = 0; r < g; ++r)
    std::copy_n(&cached[size_t(r * kvd)], kvd, &pool[size_t(slots[size_t(r)] * kvd)]);
  const auto pool_bits = test::round_bf16(pool);
  d_cache = test::to_device(pool_bits);
  cuda::value_similarity(d_v.get(), d_bias.get(), reinterpret_cast<cuda::bf16*>(d_cache.get()),
                         d_slots.get(), d_sim.get(), g, kvd, nullptr);
  const auto sim = test::to_host(d_sim);
  const auto new_cache = test::to_host(d_cache);
  for (int r = 0; r < g; ++r) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < kvd; ++i) {
      const double x = double(v_new[size_t(r * kvd + i)]) + bias[size_t(i)];
      const double y = cached[size_t(r * kvd + i)];
      ab += x * y;
      aa += x * x;
      bb += y * y;
    }
    EXPECT_NEAR(sim[size_t(r)], ab / std::max(std::sqrt(aa) * std::sqrt(bb), 1e-8), 1e-5)
        << "row " << r;
    for (int i = 0; i < kvd; ++i)
      EXPECT_EQ(new_cache[size_t(slots[size_t(r)] * kvd + i)],
                f32_to_bf16(v_new[size_t(r * kvd + i)] + bias[size_t(i)]));
  }
  EXPECT_NEAR(sim[2], 1.0f, 1e-2);
  EXPECT_NEAR(sim[3], -1.0f, 1e-2);
}

}  // namespace
}  // namespace dllm
