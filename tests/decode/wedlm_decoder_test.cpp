// WeDLM streaming parallel decoding against a scripted fake model (the step logic: refill count,
// reorder, commit run, entropy + distance rule, tau = none, stops, padding, metrics, parameters),
// and against the real CPU backend for the property that makes it cache-exact: the K/V it commits
// from its windows equal those of a plain causal prefill of the final sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "core/error.h"
#include "engine/engine_core.h"
#include "backend/cpu/cpu_backend.h"
#include "support/fake_backend.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using test::FakeBackend;

constexpr int32_t kMask = 99;
constexpr float kNone = -std::numeric_limits<float>::infinity();

ModelConfig wedlm_config() {
  ModelConfig c;
  c.family = "wedlm";
  c.vocab_size = 100;
  c.mask_token_id = kMask;
  c.attention = AttentionKind::kCausal;
  return c;
}

int32_t token_at(int32_t pos) {
  return 10 + pos % 80;
}

// Stats whose token is token_at(pos) and whose raw entropy is `entropy`.
TokenStats with_entropy(int32_t pos, float entropy) {
  TokenStats s = test::stats(token_at(pos), 0.5f);
  s.entropy = entropy;
  return s;
}

DecodeParams wedlm_params(int32_t window, float tau, float lambda, int32_t max_tokens,
                          bool pad = false) {
  DecodeParams p;
  p.strategy = "wedlm";
  p.window = window;
  p.entropy_threshold = tau;
  p.pos_penalty = lambda;
  p.max_tokens = max_tokens;
  p.pad_window = pad;
  return p;
}

// The Engine's loop without a Model: plan, forward, observe; stop ids and max_tokens applied to
// the final tokens.
struct Run {
  std::vector<int32_t> ids;
  std::string finish;
  std::vector<std::vector<int32_t>> canvases;
  std::vector<DecoderMetric> metrics;
};

Run run(DecodeParams p, const std::vector<int32_t>& prompt, FakeBackend& fake,
        std::vector<int64_t> stops = {}) {
  const ModelConfig c = wedlm_config();
  p = resolve_decode_params(c, p, static_cast<int64_t>(prompt.size()));
  auto dec = make_decoder(c, p, prompt);
  auto cache = fake.create_cache(dec->cache_capacity());
  Run r;
  r.finish = "length";
  size_t emitted = 0;
  bool done = false;
  while (!done) {
    SequenceForward f;
    f.cache = cache.get();
    if (!dec->plan(f)) break;
    dec->observe(fake.forward(std::span(&f, 1))[0]);
    r.canvases.push_back(dec->canvas());
    const auto& fin = dec->final_tokens();
    for (; emitted < fin.size() && !done; ++emitted) {
      if (std::find(stops.begin(), stops.end(), fin[emitted]) != stops.end()) {
        r.finish = "stop";
        done = true;
      } else if (r.ids.size() == static_cast<size_t>(p.max_tokens)) {
        done = true;
      } else {
        r.ids.push_back(fin[emitted]);
      }
    }
    if (r.ids.size() == static_cast<size_t>(p.max_tokens)) done = true;
  }
  r.metrics = dec->metrics(static_cast<int64_t>(r.ids.size()));
  return r;
}

const int32_t M = kMask;

TEST(WedlmDecoder, PrefillThenAWindowOfMasks) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return with_entropy(pos, 0.0f); });
  run(wedlm_params(4, 0.4f, 0.02f, 1), {1, 2, 3}, fake);
  ASSERT_GE(fake.calls.size(), 2u);
  const auto& pre = fake.calls[0];
  EXPECT_EQ(pre.tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(pre.positions, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pre.rule.kind, AttentionKind::kCausal);
  EXPECT_EQ(pre.write, CacheWrite::kAppend);
  EXPECT_EQ(pre.append_count, -1);
  EXPECT_TRUE(pre.output_rows.empty()) << "the prefill's logits are not needed";
  const auto& s1 = fake.calls[1];
  EXPECT_EQ(s1.tokens, (std::vector<int32_t>{M, M, M, M}));
  EXPECT_EQ(s1.positions, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(s1.rule.kind, AttentionKind::kCausal);
  EXPECT_EQ(s1.write, CacheWrite::kAppend);
  EXPECT_EQ(s1.append_count, 0) << "nothing is filled yet: nothing to commit";
  EXPECT_EQ(s1.output_rows, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(s1.want_stats);
  EXPECT_EQ(s1.sampler.order, FilterOrder::kTopKTopPTemperature);
  EXPECT_EQ(s1.sampler.banned_tokens, (std::vector<int32_t>{kMask}));
  EXPECT_EQ(s1.rng.step, 1u) << "draws are keyed by the forward index";
}

TEST(WedlmDecoder, RefillReorderCommitRunAndFallback) {
  // W = 4, P = 3, tau = 1, lambda = 0.1; entropy by logical position.
  const std::map<int32_t, float> h = {{3, 0.2f}, {4, 0.5f},  {5, 2.0f}, {6, 0.1f},
                                      {7, 0.3f}, {8, 0.05f}, {9, 9.0f}, {10, 9.0f}};
  FakeBackend fake([&](const SequenceForward&, int32_t pos) {
    const auto it = h.find(pos);
    return with_entropy(pos, it == h.end() ? 9.0f : it->second);
  });
  const auto r = run(wedlm_params(4, 1.0f, 0.1f, 6), {1, 2, 3}, fake);
  const int32_t t3 = token_at(3), t4 = token_at(4), t5 = token_at(5), t6 = token_at(6),
                t7 = token_at(7), t8 = token_at(8);
  ASSERT_EQ(r.canvases.size(), 5u) << "prefill + four decode steps";
  // Step 1: adjusted 0.2, 0.6, 2.2, 0.4 -> slots 0, 1, 3 filled.
  EXPECT_EQ(r.canvases[1], (std::vector<int32_t>{t3, t4, M, t6}));
  // Step 2: refill 2 masks; filled first, masks after, logical positions kept; the leading run
  // of two is committed by this forward.
  const auto& s2 = fake.calls[2];
  EXPECT_EQ(s2.tokens, (std::vector<int32_t>{t3, t4, t6, M, M, M}));
  EXPECT_EQ(s2.positions, (std::vector<int32_t>{3, 4, 6, 5, 7, 8}));
  EXPECT_EQ(s2.append_count, 2);
  EXPECT_EQ(s2.output_rows, (std::vector<int32_t>{3, 4, 5}));
  // After the commit the window is [M, t6, M, M]: distances 0, 2, 3 -> 2.0, 0.5, 0.35.
  EXPECT_EQ(r.canvases[2], (std::vector<int32_t>{t3, t4, M, t6, t7, t8}));
  // Step 3: no leading run (slot 0 is a mask): no refill, nothing committed; only 5's entropy
  // (2.0) is left, above tau: the single best is filled anyway.
  const auto& s3 = fake.calls[3];
  EXPECT_EQ(s3.tokens, (std::vector<int32_t>{t6, t7, t8, M}));
  EXPECT_EQ(s3.positions, (std::vector<int32_t>{6, 7, 8, 5}));
  EXPECT_EQ(s3.append_count, 0);
  EXPECT_EQ(s3.output_rows, (std::vector<int32_t>{3}));
  EXPECT_EQ(r.canvases[3], (std::vector<int32_t>{t3, t4, t5, t6, t7, t8}));
  // Step 4: the whole window is filled: four masks refilled, four committed.
  const auto& s4 = fake.calls[4];
  EXPECT_EQ(s4.tokens, (std::vector<int32_t>{t5, t6, t7, t8, M, M, M, M}));
  EXPECT_EQ(s4.positions, (std::vector<int32_t>{5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(s4.append_count, 4);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{t3, t4, t5, t6, t7, t8}));
  EXPECT_EQ(r.finish, "length");
  EXPECT_EQ(fake.calls.size(), 5u) << "max_tokens reached by the commit of step 4";
}

// The first decode step's fill for entropies h over a window of 4 masks.
std::vector<int32_t> first_fill(const std::vector<float>& h, float tau, float lambda) {
  // Later steps forward positions past the 4-slot window (found by ASan: h was read past its
  // end); they get an entropy no rule fills, so only the first step's window matters.
  FakeBackend fake([&](const SequenceForward&, int32_t pos) {
    const auto i = static_cast<size_t>(pos - 1);
    return with_entropy(pos, i < h.size() ? h[i] : 100.0f);
  });
  return run(wedlm_params(4, tau, lambda, 1), {1}, fake).canvases[1];
}

TEST(WedlmDecoder, EntropyPlusDistancePenaltyRule) {
  const std::vector<float> h = {1.0f, 0.95f, 0.9f, 0.85f};
  const int32_t t1 = token_at(1), t2 = token_at(2), t3 = token_at(3), t4 = token_at(4);
  // Nothing below tau: the single lowest adjusted entropy.
  EXPECT_EQ(first_fill(h, kNone, 0.0f), (std::vector<int32_t>{M, M, M, t4}));
  EXPECT_EQ(first_fill(h, kNone, 0.1f), (std::vector<int32_t>{t1, M, M, M}))
      << "1.0, 1.05, 1.1, 1.15: the penalty makes the first slot the best";
  EXPECT_EQ(first_fill(h, 0.5f, 0.0f), (std::vector<int32_t>{M, M, M, t4}));
  // Everything below tau.
  EXPECT_EQ(first_fill(h, 1.02f, 0.02f), (std::vector<int32_t>{t1, t2, t3, t4}))
      << "1.0, 0.97, 0.94, 0.91";
  EXPECT_EQ(first_fill(h, 1.02f, 0.1f), (std::vector<int32_t>{t1, M, M, M}));
  EXPECT_EQ(first_fill(h, 0.96f, 0.0f), (std::vector<int32_t>{M, t2, t3, t4}));
  EXPECT_EQ(first_fill(h, 0.9f, 0.0f), (std::vector<int32_t>{M, M, M, t4})) << "strictly below";
  // Ties: the first minimum.
  EXPECT_EQ(first_fill({0.5f, 0.5f, 0.5f, 0.5f}, kNone, 0.0f), (std::vector<int32_t>{t1, M, M, M}));
}

TEST(WedlmDecoder, DistanceCountsFilledSlotsFromTheFirstMask) {
  // Step 1 fills window slots 1 and 2 only. Step 2 sees masks at slots 0 and 3: slot 3 is at
  // distance 3 (filled slots count), not 1 (its rank among the masks).
  FakeBackend fake([](const SequenceForward& seq, int32_t pos) {
    const bool step1 = seq.rng.step == 1;
    if (pos == 1) return with_entropy(pos, step1 ? 0.5f : 0.3f);
    if (pos == 2 || pos == 3) return with_entropy(pos, 0.0f);
    return with_entropy(pos, step1 ? 0.45f : 0.15f);  // step 1: 0.45 + 0.3 = 0.75
  });
  const auto r = run(wedlm_params(4, 0.4f, 0.1f, 2), {7}, fake);
  EXPECT_EQ(r.canvases[1], (std::vector<int32_t>{M, token_at(2), token_at(3), M}));
  // Step 2: slot 0 -> 0.3 (filled); slot 3 -> 0.15 + 3 * 0.1 = 0.45 (not; 0.25 if d were 1).
  EXPECT_EQ(r.canvases[2], (std::vector<int32_t>{token_at(1), token_at(2), token_at(3), M}));
}

TEST(WedlmDecoder, NoneFillsOneTokenPerStep) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return with_entropy(pos, 0.0f); });
  const auto r = run(wedlm_params(4, kNone, 0.02f, 5), {1, 2}, fake);
  // prefill; step 1 fills slot 0; every later step commits it and fills the next slot.
  ASSERT_EQ(fake.calls.size(), 7u);
  for (size_t i = 1; i < r.canvases.size(); ++i) {
    int masks = 0;
    for (int32_t t : r.canvases[i]) masks += t == M;
    EXPECT_EQ(masks, 3) << "after forward " << i;
    EXPECT_EQ(r.canvases[i].size(), i + 3);
  }
  for (size_t i = 2; i < fake.calls.size(); ++i) {
    EXPECT_EQ(fake.calls[i].append_count, 1);
    EXPECT_EQ(fake.calls[i].tokens.size(), 5u) << "W + the one refilled mask";
  }
  EXPECT_EQ(r.ids, (std::vector<int32_t>{token_at(2), token_at(3), token_at(4), token_at(5),
                                         token_at(6)}));
}

TEST(WedlmDecoder, StopTokenInsideACommitRun) {
  // Everything confident: the whole window fills in one step and commits in the next.
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return with_entropy(pos, 0.0f); });
  const auto r = run(wedlm_params(4, 0.4f, 0.02f, 20), {1, 2, 3}, fake, {token_at(8)});
  // Commits: [3..6] then [7..10]; the stop token (position 8) is the second of its run.
  EXPECT_EQ(r.finish, "stop");
  EXPECT_EQ(r.ids, (std::vector<int32_t>{token_at(3), token_at(4), token_at(5), token_at(6),
                                         token_at(7)}));
  EXPECT_EQ(fake.calls.size(), 4u) << "prefill, fill, commit 4 + fill, commit 4 (stop)";
  EXPECT_EQ(fake.calls[3].append_count, 4);
}

TEST(WedlmDecoder, MaxTokensInsideACommitRun) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return with_entropy(pos, 0.0f); });
  const auto r = run(wedlm_params(4, 0.4f, 0.02f, 6), {1, 2, 3}, fake);
  EXPECT_EQ(r.finish, "length");
  EXPECT_EQ(r.ids.size(), 6u);
  EXPECT_EQ(r.ids.back(), token_at(8));
  EXPECT_EQ(fake.calls.size(), 4u);
}

TEST(WedlmDecoder, PaddingKeepsOneShapeAndTheTrajectory) {
  auto script = [](const SequenceForward&, int32_t pos) {
    return with_entropy(pos, 0.1f * static_cast<float>(pos % 5));
  };
  FakeBackend plain(script), padded(script);
  const auto a = run(wedlm_params(4, 0.25f, 0.02f, 12, false), {1, 2, 3}, plain);
  const auto b = run(wedlm_params(4, 0.25f, 0.02f, 12, true), {1, 2, 3}, padded);
  EXPECT_EQ(a.canvases, b.canvases);
  EXPECT_EQ(a.ids, b.ids);
  ASSERT_EQ(plain.calls.size(), padded.calls.size());
  bool varied = false;
  for (size_t i = 1; i < padded.calls.size(); ++i) {
    const auto& x = plain.calls[i];
    const auto& y = padded.calls[i];
    varied |= x.tokens.size() != plain.calls[1].tokens.size();
    ASSERT_EQ(y.tokens.size(), 8u) << "every step forwards 2W queries";
    // The real window first, unchanged; then masks at the positions after it.
    EXPECT_EQ(std::vector<int32_t>(y.tokens.begin(), y.tokens.begin() + x.tokens.size()), x.tokens);
    EXPECT_EQ(std::vector<int32_t>(y.positions.begin(), y.positions.begin() + x.tokens.size()),
              x.positions);
    int32_t next = *std::max_element(x.positions.begin(), x.positions.end()) + 1;
    for (size_t j = x.tokens.size(); j < y.tokens.size(); ++j) {
      EXPECT_EQ(y.tokens[j], M);
      EXPECT_EQ(y.positions[j], next++);
    }
    // Every row is an output row (a fixed shape for CUDA graphs); the decoder reads the masks'.
    std::vector<int32_t> all(8);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(y.output_rows, all);
    EXPECT_EQ(y.append_count, x.append_count);
  }
  EXPECT_TRUE(varied) << "the unpadded window should vary in size for this test to mean much";
  EXPECT_EQ(a.metrics[0].value, b.metrics[0].value) << "padding is not counted in N_fwd";
}

TEST(WedlmDecoder, MetricsCountWindowTokens) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return with_entropy(pos, 0.0f); });
  const auto r = run(wedlm_params(4, 0.4f, 0.02f, 6), {1, 2, 3}, fake);
  // Decode forwards: 4 masks, then 4 + 4 twice: N_fwd = 20, N_gen = 6.
  ASSERT_EQ(r.metrics.size(), 3u);
  EXPECT_EQ(r.metrics[0].name, "p_cache");
  EXPECT_DOUBLE_EQ(r.metrics[0].value, 6.0 / 20.0);
  EXPECT_EQ(r.metrics[1].name, "decode_forwards");
  EXPECT_EQ(r.metrics[1].value, 3.0);
  EXPECT_TRUE(r.metrics[1].is_count);
  EXPECT_EQ(r.metrics[2].name, "window_tokens");
  EXPECT_EQ(r.metrics[2].value, 20.0);
}

TEST(WedlmDecoder, SeededDrawsAreKeyedByForwardAndPosition) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return with_entropy(pos, 0.0f); });
  DecodeParams p = wedlm_params(4, 0.4f, 0.02f, 8);
  p.sampler.temperature = 0.7f;
  p.sampler.top_k = 5;
  p.seed = 42;
  run(p, {1, 2, 3}, fake);
  for (size_t i = 1; i < fake.calls.size(); ++i) {
    const auto& c = fake.calls[i];
    EXPECT_EQ(c.rng.seed, 42u);
    EXPECT_EQ(c.rng.step, i);
    EXPECT_TRUE(c.rng_positions.empty()) << "each row's own logical position keys its draw";
    EXPECT_EQ(c.sampler.temperature, 0.7f);
    EXPECT_EQ(c.sampler.top_k, 5);
  }
}

TEST(WedlmParams, FamilyDefaultsAndErrors) {
  const ModelConfig c = wedlm_config();
  DecodeParams p;
  const DecodeParams r = resolve_decode_params(c, p, 3);
  EXPECT_EQ(r.strategy, "wedlm") << "the default strategy of wedlm checkpoints";
  EXPECT_EQ(r.window, 16);
  EXPECT_FLOAT_EQ(*r.entropy_threshold, 0.4f);
  EXPECT_FLOAT_EQ(*r.pos_penalty, 0.02f);
  EXPECT_EQ(r.sampler.order, FilterOrder::kTopKTopPTemperature);
  EXPECT_EQ(resolve_decode_params(c, r, 3).window, 16) << "resolving twice changes nothing";
  p.strategy = "ar";
  EXPECT_EQ(resolve_decode_params(c, p, 3).strategy, "ar") << "ar stays available";

  auto error = [&](DecodeParams q) {
    try {
      resolve_decode_params(c, q, 3);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto w = [](auto edit) {
    DecodeParams q;
    edit(q);
    return q;
  };
  auto has = [](const std::string& s, const std::string& needle) {
    return s.find(needle) != std::string::npos;
  };
  EXPECT_PRED2(has, error(w([](auto& q) { q.window = 0; })), "--window must be positive");
  EXPECT_PRED2(has, error(w([](auto& q) { q.window = -3; })), "--window must be positive");
  EXPECT_PRED2(has, error(w([](auto& q) { q.entropy_threshold = -0.5f; })),
               "--entropy-threshold must be >= 0 or 'none'");
  EXPECT_PRED2(has, error(w([](auto& q) { q.entropy_threshold = std::nanf(""); })),
               "--entropy-threshold");
  EXPECT_PRED2(has, error(w([](auto& q) { q.pos_penalty = -0.1f; })), "--pos-penalty");
  EXPECT_PRED2(has,
               error(w([](auto& q) { q.pos_penalty = std::numeric_limits<float>::infinity(); })),
               "--pos-penalty");
  EXPECT_PRED2(has, error(w([](auto& q) { q.threshold = 0.9f; })), "see --entropy-threshold");
  EXPECT_PRED2(has, error(w([](auto& q) { q.block_length = 4; })), "--block-length");
  EXPECT_PRED2(has, error(w([](auto& q) { q.steps = 4; })), "--steps");
  EXPECT_PRED2(has, error(w([](auto& q) {
                 q.strategy = "ar";
                 q.window = 8;
               })),
               "--window applies only to --strategy wedlm");
  EXPECT_PRED2(has, error(w([](auto& q) {
                 q.strategy = "ar";
                 q.pos_penalty = 0.1f;
               })),
               "--pos-penalty applies only");
  EXPECT_PRED2(has, error(w([](auto& q) { q.strategy = "block"; })), "not available for wedlm");
  ModelConfig small = c;
  small.max_position_embeddings = 64;
  DecodeParams q;
  q.max_tokens = 40;
  q.window = 16;
  EXPECT_THROW(resolve_decode_params(small, q, 3), Error) << "3 + 40 + 2W > 64";
  q.window = 8;
  EXPECT_NO_THROW(resolve_decode_params(small, q, 3));
}

// ------------------------------------------------------------------ cache exactness, real model
//
// Runs WeDLM on the CPU backend with a threshold that commits multi-token runs, keeps the cache,
// then prefills prompt + committed tokens causally into a fresh cache: every committed slot must
// hold the same K/V (and logical position) as the plain causal forward computes.
void expect_cache_exact(const std::string& fixture, bool pad) {
  auto model = Model::load(test::model_fixture(fixture));
  auto backend = make_cpu_backend(*model);
  const std::vector<int32_t> prompt = {17, 4, 230, 88, 5};
  DecodeParams p = wedlm_params(8, 5.3f, 0.01f, 24, pad);
  p = resolve_decode_params(model->config(), p, static_cast<int64_t>(prompt.size()));
  auto dec = make_decoder(model->config(), p, prompt);
  auto cache = backend->create_cache(dec->cache_capacity());
  int32_t longest_run = 0;
  for (;;) {
    SequenceForward f;
    f.cache = cache.get();
    if (!dec->plan(f)) break;
    if (f.append_count > 0) longest_run = std::max(longest_run, f.append_count);
    dec->observe(backend->forward(std::span(&f, 1))[0]);
    if (dec->final_tokens().size() >= 24) break;
  }
  ASSERT_GE(longest_run, 2) << "the test needs multi-token commits (raise the threshold)";
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), dec->final_tokens().begin(), dec->final_tokens().end());
  ASSERT_EQ(cache->length(), static_cast<int64_t>(seq.size()));

  auto fresh = backend->create_cache(static_cast<int64_t>(seq.size()));
  SequenceForward f;
  f.cache = fresh.get();
  f.tokens = seq;
  for (size_t i = 0; i < seq.size(); ++i) f.positions.push_back(static_cast<int32_t>(i));
  f.rule = AttentionRule::causal();
  f.write = CacheWrite::kAppend;
  backend->forward(std::span(&f, 1));

  // Both caches live in the backend's pool: read their K/V through their page tables.
  auto& cpu = dynamic_cast<cpu_backend::CpuBackend&>(*backend);
  const int64_t d = model->config().kv_dim();
  double worst = 0, scale = 0;
  for (int64_t layer = 0; layer < model->config().num_layers; ++layer)
    for (int64_t s = 0; s < cache->length(); ++s) {
      EXPECT_EQ(cache->positions()[static_cast<size_t>(s)], s) << "slot " << s;
      const float* ka = cpu.k_row(layer, cache->physical_slot(s));
      const float* va = cpu.v_row(layer, cache->physical_slot(s));
      const float* kb = cpu.k_row(layer, fresh->physical_slot(s));
      const float* vb = cpu.v_row(layer, fresh->physical_slot(s));
      for (int64_t i = 0; i < d; ++i) {
        worst = std::max<double>(worst, std::fabs(ka[i] - kb[i]));
        worst = std::max<double>(worst, std::fabs(va[i] - vb[i]));
        scale = std::max<double>(scale, std::fabs(kb[i]));
      }
    }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 1e-4 * scale) << "committed K/V differ from a causal prefill of the result";
}

TEST(WedlmCache, CommittedKvEqualsACausalPrefillQwen3) {
  expect_cache_exact("wedlm-qwen3-tiny", true);
}
TEST(WedlmCache, CommittedKvEqualsACausalPrefillQwen25Unpadded) {
  expect_cache_exact("wedlm-qwen25-tiny", false);
}

}  // namespace
}  // namespace dllm
