// d²Cache: the selection arithmetic (method-specs §4.4-4.5) and the decoder's cached path
// against vanilla full diffusion. Trajectory parity with tools/reference_d2cache.py is in
// trajectory_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "decode/d2cache_decoder.h"
#include "decode/d2cache_selection.h"
#include "engine/engine_core.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

// Random head-averaged attention rows: each row a distribution over the canvas.
std::vector<float> random_rows(std::mt19937& gen, int64_t layers, size_t n, int64_t width) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(layers) * n * static_cast<size_t>(width));
  for (size_t r = 0; r < rows.size() / static_cast<size_t>(width); ++r) {
    float sum = 0;
    for (int64_t j = 0; j < width; ++j)
      sum += rows[r * size_t(width) + size_t(j)] = u(gen) * u(gen);
    for (int64_t j = 0; j < width; ++j) rows[r * size_t(width) + size_t(j)] /= sum;
  }
  return rows;
}

TEST(D2CacheRollout, ReverseVectorEqualsDenseProduct) {
  std::mt19937 gen(9);
  for (const auto& [t, layers] : {std::pair<int64_t, int64_t>{12, 2}, {40, 5}, {64, 3}}) {
    for (size_t n : {size_t(1), size_t(7), size_t(t)}) {
      std::vector<int32_t> q(static_cast<size_t>(t));
      std::iota(q.begin(), q.end(), 0);
      std::shuffle(q.begin(), q.end(), gen);
      q.resize(n);
      std::sort(q.begin(), q.end());
      const auto rows = random_rows(gen, layers, n, t);
      const auto fast = d2cache::rollout_importance(rows, layers, q, t);
      const auto dense = d2cache::rollout_importance_dense(rows, layers, q, t);
      ASSERT_EQ(fast.size(), size_t(t));
      double total = 0;
      for (int64_t j = 0; j < t; ++j) {
        EXPECT_NEAR(fast[size_t(j)], dense[size_t(j)], 1e-9 * t) << "T " << t << " n " << n;
        total += fast[size_t(j)];
      }
      EXPECT_NEAR(total, double(t), 1e-9 * t);  // rows of C sum to 1
    }
  }
}

TEST(D2CacheRollout, NoQueriesIsIdentity) {
  const auto c = d2cache::rollout_importance({}, 3, {}, 5);
  EXPECT_EQ(c, std::vector<double>(5, 1.0));
}

TEST(D2CacheSelection, NucleusKeepsWhileCumulativeAtMostP) {
  // Normalised over the allowed tokens: 0.5, 0.3, 0.2 (index 3 not allowed).
  const std::vector<double> s = {0.3, 0.5, 0.2, 9.0};
  const std::vector<bool> allowed = {true, true, true, false};
  EXPECT_EQ(d2cache::nucleus_select(s, 0.85, allowed),
            (std::vector<bool>{true, true, false, false}));
  // Below the first element: min_k = 1 keeps the largest.
  EXPECT_EQ(d2cache::nucleus_select(s, 0.1, allowed),
            (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(d2cache::nucleus_select(s, 1.0, allowed), (std::vector<bool>{true, true, true, false}));
}

TEST(D2CacheSelection, InflateFillsShortGaps) {
  std::vector<bool> sel = {true, false, false, true, false, false, false, false, true, false};
  d2cache::inflate(sel, 3);  // gap 0..3 has span 3 (filled), 3..8 span 5 (not)
  EXPECT_EQ(sel,
            (std::vector<bool>{true, true, true, true, false, false, false, false, true, false}));
  std::vector<bool> same = sel;
  d2cache::inflate(same, 0);
  EXPECT_EQ(same, sel);
}

TEST(D2CacheSelection, DensityIsOneWhenOffAndRisesNearKnownTokens) {
  EXPECT_EQ(d2cache::certainty_density({false, true, false}, 0.0),
            (std::vector<double>{1.0, 1.0, 1.0}));
  // All masked: the left padding (the prompt) is the only known mass, so density falls with
  // the distance from the prompt.
  const auto d = d2cache::certainty_density(std::vector<bool>(8, false), 2.0);
  for (size_t i = 1; i < d.size(); ++i) EXPECT_LT(d[i], d[i - 1]);
  // phi-weighted fraction of known tokens: one known token at 5 lifts its neighbours.
  std::vector<bool> known(8, false);
  known[5] = true;
  const auto e = d2cache::certainty_density(known, 2.0);
  EXPECT_GT(e[5], d[5]);
  EXPECT_GT(e[6], d[6]);
  EXPECT_NEAR(e[5] - d[5], 1.0 / (std::sqrt(2 * M_PI) * 2.0),
              1e-6);  // phi(0) / Z, Z = sqrt(2pi) sigma
}

std::vector<std::vector<int32_t>> trajectory(EngineCore& engine, const Model& model,
                                             const std::vector<int32_t>& prompt, DecodeParams p) {
  GenerationRequest req;
  req.prompt = prompt;
  req.params = resolve_decode_params(model.config(), p, int64_t(prompt.size()));
  std::vector<std::vector<int32_t>> canvases;
  engine.generate(req, nullptr, [&](const Decoder& d, auto) { canvases.push_back(d.canvas()); });
  return canvases;
}

// Every row recomputed every step (through the cached write-at-slots path), certainty prior
// off: d2Cache is vanilla LLaDA low-confidence decoding with one token per step.
TEST(D2CacheDecoder, SelectAllReproducesVanillaLlada) {
  auto model = Model::load(test::model_fixture("llada-tiny"));
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  for (const auto& [prompt, block] : {std::pair<std::vector<int32_t>, int32_t>{{5, 17, 99, 3}, 16},
                                      {{40, 2, 8, 71, 9, 120}, 4}}) {
    DecodeParams full;
    full.strategy = "full";
    full.max_tokens = 16;
    full.block_length = block;
    full.steps = 16;
    DecodeParams d2c;
    d2c.strategy = "d2cache";
    d2c.max_tokens = 16;
    d2c.block_length = block;
    d2c.d2c_sigma = 0.0f;
    d2c.d2c_select_all = true;
    const auto want = trajectory(engine, *model, prompt, full);
    ASSERT_EQ(want.size(), 16u);
    EXPECT_EQ(trajectory(engine, *model, prompt, d2c), want);
    // The cached, selective path is a different computation (else the test above proves
    // nothing about selection).
    d2c.d2c_select_all = false;
    d2c.d2c_k = 2;
    d2c.d2c_p = 0.0f;
    EXPECT_NE(trajectory(engine, *model, prompt, d2c), want);
  }
}

// Fewer rows than the canvas are forwarded after step 0.
TEST(D2CacheDecoder, ForwardsOnlySelectedRowsAfterStepZero) {
  auto model = Model::load(test::model_fixture("dream-tiny"));
  DecodeParams p;
  p.strategy = "d2cache";
  p.max_tokens = 24;
  p.d2c_k = 4;
  const std::vector<int32_t> prompt = {5, 17, 99, 3};
  p = resolve_decode_params(model->config(), p, 4);
  D2CacheDecoder dec(model->config(), p, prompt);
  auto backend = make_cpu_backend(*model);
  auto cache = backend->create_cache(dec.cache_capacity());
  for (int step = 0; step < 5; ++step) {
    SequenceForward f;
    f.cache = cache.get();
    ASSERT_TRUE(dec.plan(f));
    if (step == 0) {
      EXPECT_EQ(f.write, CacheWrite::kAppend);
      EXPECT_EQ(f.tokens.size(), 28u);
    } else {
      EXPECT_EQ(f.write, CacheWrite::kAtSlots);
      EXPECT_LT(f.tokens.size(), 28u);
      EXPECT_GE(f.tokens.size(), 4u);  // at least k masks' rows (+ the decoded token)
    }
    EXPECT_TRUE(f.want_attention_rollout);
    dec.observe(backend->forward(std::span(&f, 1))[0]);
  }
}

TEST(D2CacheDecoder, BadKnobsAreRefusedByName) {
  auto llada = Model::load(test::model_fixture("llada-tiny"));
  auto sdar = Model::load(test::model_fixture("sdar-tiny"));
  auto expect_error = [](const ModelConfig& c, DecodeParams p, const std::string& what) {
    try {
      resolve_decode_params(c, p, 4);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  DecodeParams p;
  p.strategy = "d2cache";
  p.max_tokens = 16;
  auto with = [&](auto f) {
    DecodeParams q = p;
    f(q);
    return q;
  };
  expect_error(llada->config(), with([](DecodeParams& q) { q.d2c_k = 0; }), "--d2c-k");
  expect_error(llada->config(), with([](DecodeParams& q) { q.d2c_sigma = -1; }), "--d2c-sigma");
  expect_error(llada->config(), with([](DecodeParams& q) { q.d2c_p = 1.5f; }), "--d2c-p");
  expect_error(llada->config(), with([](DecodeParams& q) { q.d2c_inflate = -2; }), "--d2c-inflate");
  expect_error(llada->config(), with([](DecodeParams& q) { q.block_length = 5; }),
               "--block-length");
  expect_error(llada->config(), with([](DecodeParams& q) { q.sampler.temperature = 1; }),
               "--temperature");
  expect_error(sdar->config(), p, "--strategy 'd2cache'");
  DecodeParams full;
  full.strategy = "full";
  full.max_tokens = 16;
  full.d2c_frozen_conf = true;
  expect_error(llada->config(), full, "--d2c-");
}

}  // namespace
}  // namespace dllm
