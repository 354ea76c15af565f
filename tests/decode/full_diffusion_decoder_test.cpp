// Full-diffusion decoders (LLaDA, Dream) against a scripted fake model: the schedules (LLaDA's
// per-block counts, Dream's float32 timesteps and truncated counts including steps that unmask
// nothing), the forwards they plan (whole canvas, bidirectional, no cache, right-shifted rows,
// classifier-free guidance's second sequence), the eos flags and bad parameters. Expected
// timesteps and counts were printed by torch (torch.linspace / the reference's float32 formula).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "core/error.h"
#include "decode/full_diffusion_decoder.h"
#include "decode/full_diffusion_schedule.h"
#include "support/fake_backend.h"

namespace dllm {
namespace {

using test::FakeBackend;
using test::stats;

constexpr int32_t kMask = 99, kEos = 90, kEot = 91;

ModelConfig llada_config() {
  ModelConfig c;
  c.family = "llada";
  c.vocab_size = 100;
  c.mask_token_id = kMask;
  c.eos_token_id = kEos;
  c.eot_token_id = kEot;
  c.attention = AttentionKind::kBidirectional;
  return c;
}

ModelConfig dream_config() {
  ModelConfig c = llada_config();
  c.family = "dream";
  c.eot_token_id = -1;
  c.shifted_logits = true;
  return c;
}

int32_t token_at(int32_t pos) {
  return 10 + pos % 70;
}

struct Run {
  std::vector<int32_t> ids;
  std::string finish = "length";
  std::vector<std::vector<int32_t>> canvases;
  int64_t forwards = 0;
};

// The Engine's loop without a Model: plan_step / forward / observe_step, stop ids, max_tokens.
Run run(const ModelConfig& c, DecodeParams p, const std::vector<int32_t>& prompt, FakeBackend& fake,
        const std::vector<int32_t>& stops = {}) {
  p = resolve_decode_params(c, p, static_cast<int64_t>(prompt.size()));
  auto dec = make_decoder(c, p, prompt);
  EXPECT_EQ(dec->cache_capacity(), 0);
  Run r;
  size_t emitted = 0;
  for (;;) {
    std::vector<SequenceForward> fwds(1);
    if (!dec->plan_step(fwds)) break;
    dec->observe_step(fake.forward(fwds));
    r.canvases.push_back(dec->canvas());
    const auto& fin = dec->final_tokens();
    bool done = false;
    for (; emitted < fin.size() && !done; ++emitted) {
      if (std::find(stops.begin(), stops.end(), fin[emitted]) != stops.end()) {
        r.finish = "stop";
        done = true;
      } else {
        r.ids.push_back(fin[emitted]);
      }
    }
    if (done || r.ids.size() == static_cast<size_t>(p.max_tokens)) break;
  }
  r.forwards = dec->forwards();
  return r;
}

DecodeParams llada_params(int32_t max_tokens, int32_t block, int32_t steps) {
  DecodeParams p;
  p.max_tokens = max_tokens;
  p.block_length = block;
  p.steps = steps;
  return p;
}

DecodeParams dream_params(int32_t max_tokens, int32_t steps, const std::string& alg) {
  DecodeParams p;
  p.max_tokens = max_tokens;
  p.steps = steps;
  p.alg = alg;
  return p;
}

std::vector<int32_t> masks_then(std::vector<int32_t> v, size_t n) {
  v.resize(n, kMask);
  return v;
}

// ---------------------------------------------------------------------------------------- LLaDA

TEST(LladaSchedule, PerBlockCountsFromTheMasksInTheBlock) {
  // gen 10, block 5, steps 6: 3 steps per block of 5 masks -> 2, 2, 1 (generate.py's
  // get_num_transfer_tokens).
  LladaSchedule s({1, 2, 3}, 10, 5, 6, kMask);
  EXPECT_EQ(s.steps_per_block(), 3);
  std::vector<int32_t> decided_after_step;
  while (!s.done()) {
    const auto pending = s.pending();
    for (int32_t pos : pending) {
      EXPECT_GE(pos, 3 + 5 * s.block());
      EXPECT_LT(pos, 3 + 5 * (s.block() + 1)) << "only the current block is decided";
    }
    std::vector<double> conf(pending.size());
    for (size_t i = 0; i < conf.size(); ++i) conf[i] = static_cast<double>(i);
    std::vector<int32_t> tokens(pending.size(), 7);
    s.apply(pending, tokens, conf);
    decided_after_step.push_back(
        static_cast<int32_t>(std::count(s.tokens().begin() + 3, s.tokens().end(), 7)));
  }
  EXPECT_EQ(decided_after_step, (std::vector<int32_t>{2, 4, 5, 7, 9, 10}));
  EXPECT_EQ(s.tokens(), (std::vector<int32_t>{1, 2, 3, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}));
}

TEST(LladaDecoder, UnmasksTheMostConfidentMasksOfTheBlockStepByStep) {
  // Confidence grows with the position: each block fills right to left, k per step.
  FakeBackend fake([](const SequenceForward&, int32_t pos) {
    return stats(token_at(pos), 0.1f + 0.01f * static_cast<float>(pos));
  });
  const auto r = run(llada_config(), llada_params(8, 4, 4), {1, 2}, fake);
  const int32_t M = kMask;
  const auto t = token_at;
  const std::vector<std::vector<int32_t>> want = {
      {M, M, t(4), t(5), M, M, M, M},
      {t(2), t(3), t(4), t(5), M, M, M, M},
      {t(2), t(3), t(4), t(5), M, M, t(8), t(9)},
      {t(2), t(3), t(4), t(5), t(6), t(7), t(8), t(9)},
  };
  EXPECT_EQ(r.canvases, want);
  EXPECT_EQ(r.forwards, 4);
  EXPECT_EQ(r.finish, "length");
  EXPECT_EQ(r.ids, want.back());
}

TEST(LladaDecoder, PlansTheWholeCanvasBidirectionallyWithoutCache) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return stats(token_at(pos), 0.5f); });
  DecodeParams p = llada_params(8, 4, 8);
  p.seed = 5;
  run(llada_config(), p, {1, 2, 3}, fake);
  ASSERT_EQ(fake.calls.size(), 8u);
  const SequenceForward& f = fake.calls[0];
  EXPECT_EQ(f.cache, nullptr);
  EXPECT_EQ(f.tokens, masks_then({1, 2, 3}, 11));
  EXPECT_EQ(f.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(f.rule.kind, AttentionKind::kBidirectional);
  EXPECT_EQ(f.write, CacheWrite::kNone);
  EXPECT_EQ(f.output_rows, (std::vector<int32_t>{3, 4, 5, 6})) << "the masks of block 0";
  EXPECT_TRUE(f.rng_positions.empty()) << "position-aligned: the row's position";
  EXPECT_TRUE(f.want_stats);
  EXPECT_FALSE(f.want_logits);
  EXPECT_EQ(f.sampler.method, SampleMethod::kGumbelMax);
  EXPECT_EQ(f.rng.seed, 5u);
  EXPECT_EQ(f.rng.step, 0u);
  EXPECT_EQ(fake.calls[1].rng.step, 1u);
  // Equal confidences: the lower position first (torch.topk ties, documented).
  EXPECT_EQ(fake.calls[1].output_rows, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(fake.calls[4].output_rows, (std::vector<int32_t>{7, 8, 9, 10})) << "block 1";
}

TEST(LladaDecoder, StopTokenEndsGenerationEarly) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) {
    return stats(pos == 4 ? kEos : token_at(pos), 0.9f - 0.01f * static_cast<float>(pos));
  });
  const auto r = run(llada_config(), llada_params(16, 4, 16), {1, 2}, fake, {kEos});
  EXPECT_EQ(r.finish, "stop");
  EXPECT_EQ(r.ids, (std::vector<int32_t>{token_at(2), token_at(3)}));
  EXPECT_EQ(r.forwards, 3) << "left to right: the stop token is final after 3 steps";
}

TEST(LladaDecoder, ClassifierFreeGuidanceRunsTheUnconditionalPassInTheSameBatch) {
  // Conditional rows prefer 20 (2.0 vs 1.5 for 30); unconditional rows say 20: 1.9, 30: 0.
  // un + (cfg + 1)(cond - un) with cfg 1: 20 -> 2.1, 30 -> 3.0, so 30 is decided everywhere.
  auto logits = [](const SequenceForward& seq, int32_t) {
    std::vector<float> l(100, -5.0f);
    const bool unconditional = seq.tokens[0] == kMask;
    l[20] = unconditional ? 1.9f : 2.0f;
    l[30] = unconditional ? 0.0f : 1.5f;
    return l;
  };
  FakeBackend fake(
      [](const SequenceForward&, int32_t) -> TokenStats {
        ADD_FAILURE() << "cfg must not ask for device stats";
        return {};
      },
      logits);
  DecodeParams p = llada_params(4, 4, 2);
  p.cfg_scale = 1.0f;
  const auto r = run(llada_config(), p, {1, 2}, fake);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{30, 30, 30, 30}));
  EXPECT_EQ(r.forwards, 2) << "one forward per step, two sequences in its batch";
  ASSERT_EQ(fake.calls.size(), 4u);
  const SequenceForward &cond = fake.calls[0], &un = fake.calls[1];
  EXPECT_EQ(cond.tokens, masks_then({1, 2}, 6));
  EXPECT_EQ(un.tokens, masks_then({}, 6)) << "the prompt positions masked";
  EXPECT_EQ(un.positions, cond.positions);
  EXPECT_EQ(un.output_rows, cond.output_rows);
  for (const auto* f : {&cond, &un}) {
    EXPECT_TRUE(f->want_logits);
    EXPECT_FALSE(f->want_stats);
    EXPECT_EQ(f->cache, nullptr);
    EXPECT_EQ(f->rule.kind, AttentionKind::kBidirectional);
  }
  // Without guidance the conditional logits alone decide: 20.
  FakeBackend plain([](const SequenceForward&, int32_t) { return stats(20, 0.5f); });
  EXPECT_EQ(run(llada_config(), llada_params(4, 4, 2), {1, 2}, plain).ids,
            (std::vector<int32_t>{20, 20, 20, 20}));
}

TEST(LladaDecoder, GuidanceNeedsBothResults) {
  DecodeParams p = llada_params(4, 4, 2);
  p.cfg_scale = 0.5f;
  const ModelConfig c = llada_config();
  p = resolve_decode_params(c, p, 2);
  auto dec = make_decoder(c, p, {1, 2});
  SequenceForward f;
  ASSERT_TRUE(dec->plan(f));
  EXPECT_THROW(dec->observe(SequenceResult{}), Error);
}

TEST(LladaDecoder, EosFlagsConfigureTheSampler) {
  const ModelConfig c = llada_config();
  DecodeParams p = llada_params(8, 4, 8);
  auto r = resolve_decode_params(c, p, 3);
  EXPECT_EQ(r.sampler.banned_tokens, (std::vector<int32_t>{kMask}));
  EXPECT_TRUE(r.sampler.confidence_banned_tokens.empty());
  p.logits_eos_inf = true;
  r = resolve_decode_params(c, p, 3);
  EXPECT_EQ(r.sampler.banned_tokens, (std::vector<int32_t>{kEos, kMask}));
  // confidence_eos_eot_inf: at temperature 0 generate.py's logits_with_noise *is* logits, so its
  // `logits_with_noise[..., EOS] = logits[..., EoT] = -inf` removes both columns from the
  // confidence softmax; with Gumbel noise only EoT's.
  p.logits_eos_inf = false;
  p.confidence_eos_eot_inf = true;
  r = resolve_decode_params(c, p, 3);
  EXPECT_EQ(r.sampler.confidence_banned_tokens, (std::vector<int32_t>{kEos, kEot}));
  EXPECT_EQ(r.sampler.banned_tokens, (std::vector<int32_t>{kMask})) << "EoT can still be chosen";
  p.sampler.temperature = 0.5f;
  r = resolve_decode_params(c, p, 3);
  EXPECT_EQ(r.sampler.confidence_banned_tokens, (std::vector<int32_t>{kEot}));
  EXPECT_EQ(resolve_decode_params(c, r, 3).sampler.confidence_banned_tokens,
            (std::vector<int32_t>{kEot}))
      << "resolving twice adds nothing";
}

TEST(LladaDecoder, ConfidenceIsTheRawProbabilityAfterTheConfidenceBans) {
  // Position 3 would win on p_token_tempered but its p_token_raw (the EoT quirk) is 0.
  FakeBackend fake([](const SequenceForward&, int32_t pos) {
    TokenStats s = stats(token_at(pos), 0.5f);
    if (pos == 3) {
      s.p_token_tempered = s.p_token = s.p_max = 0.99f;
      s.p_token_raw = 0.0f;
    }
    return s;
  });
  const auto r = run(llada_config(), llada_params(4, 4, 4), {1, 2}, fake);
  const int32_t M = kMask;
  EXPECT_EQ(r.canvases.front(), (std::vector<int32_t>{token_at(2), M, M, M}));
  EXPECT_EQ(r.canvases[2], (std::vector<int32_t>{token_at(2), M, token_at(4), token_at(5)}))
      << "confidence 0 goes last";
}

// ---------------------------------------------------------------------------------------- Dream

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

TEST(DreamSchedule, TimestepsMatchTorchLinspaceBitForBit) {
  const auto t7 = dream_timesteps(7, 1e-3f);
  const std::vector<uint32_t> want7 = {0x3f800000, 0x3f5b7714, 0x3f36ee27, 0x3f12653a,
                                       0x3edbb89d, 0x3e92a6c4, 0x3e1329d7, 0x3a83126f};
  ASSERT_EQ(t7.size(), want7.size());
  for (size_t i = 0; i < t7.size(); ++i) EXPECT_EQ(bits(t7[i]), want7[i]) << i;
  // 16 and 512 steps include points where two roundings (1 + round(i * step)) differ from
  // torch's single one: 6, 9, 10, 11 of 16; 28, 41, 258, 260 of 512.
  const auto t16 = dream_timesteps(16, 1e-3f);
  const std::vector<uint32_t> want16 = {0x3f800000, 0x3f700419, 0x3f600831, 0x3f500c4a, 0x3f401062,
                                        0x3f30147b, 0x3f201893, 0x3f101cac, 0x3f0020c5, 0x3ee049bb,
                                        0x3ec051ec, 0x3ea05a1d, 0x3e80624e, 0x3e40d4fe, 0x3e00e560,
                                        0x3d81eb85, 0x3a83126f};
  ASSERT_EQ(t16.size(), want16.size());
  for (size_t i = 0; i < t16.size(); ++i) EXPECT_EQ(bits(t16[i]), want16[i]) << i;
  const auto t512 = dream_timesteps(512, 1e-3f);
  const std::vector<std::pair<int, uint32_t>> want512 = {
      {0, 0x3f800000},   {1, 0x3f7f8021},   {2, 0x3f7f0042},   {28, 0x3f720395},  {41, 0x3f6b853f},
      {255, 0x3f00a0a4}, {256, 0x3f0020c5}, {257, 0x3eff41cb}, {258, 0x3efe420d}, {260, 0x3efc4290},
      {300, 0x3ed44ccd}, {511, 0x3b416873}, {512, 0x3a83126f}};
  for (const auto& [i, b] : want512) EXPECT_EQ(bits(t512[static_cast<size_t>(i)]), b) << i;
}

std::vector<int32_t> dream_counts(int32_t gen, int32_t steps) {
  DreamSchedule s({1}, gen, steps, kMask);
  std::vector<int32_t> counts;
  while (!s.done()) {
    const int32_t n = s.transfer_count();
    counts.push_back(n);
    auto masks = s.masks();
    masks.resize(static_cast<size_t>(n));
    s.apply(masks, std::vector<int32_t>(masks.size(), 5));
  }
  return counts;
}

TEST(DreamSchedule, CountsTruncateLikeTheFloat32Reference) {
  EXPECT_EQ(dream_counts(16, 16),
            (std::vector<int32_t>{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2}))
      << "steps == tokens: the first step unmasks nothing";
  EXPECT_EQ(dream_counts(8, 20),
            (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2}));
  EXPECT_EQ(dream_counts(10, 3), (std::vector<int32_t>{3, 3, 4}));
  EXPECT_EQ(dream_counts(12, 5), (std::vector<int32_t>{2, 2, 2, 2, 4}));
  const auto c = dream_counts(512, 512);
  EXPECT_EQ(std::vector<int32_t>(c.begin(), c.begin() + 4), (std::vector<int32_t>{0, 1, 1, 1}));
  EXPECT_EQ(std::count(c.begin(), c.end(), 0), 1);
  EXPECT_EQ(std::vector<int32_t>(c.end() - 5, c.end()), (std::vector<int32_t>{1, 1, 1, 1, 2}));
}

TEST(DreamSchedule, OriginTransferProbability) {
  DreamSchedule s({1}, 4, 4, kMask);
  const std::vector<uint32_t> want = {0x3e7fbe78, 0x3eaa706c, 0x3eff7d10};
  for (uint32_t b : want) {
    EXPECT_EQ(bits(s.transfer_probability()), b);
    s.apply({}, {});
  }
  EXPECT_EQ(s.transfer_probability(), 1.0f) << "the last step transfers every mask";
}

TEST(DreamDecoder, RightShiftedRowsAndStepsThatUnmaskNothing) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return stats(token_at(pos), 0.5f); });
  // gen 8 over 20 steps: 13 steps unmask nothing, each still costs its forward.
  const auto r = run(dream_config(), dream_params(8, 20, "maskgit_plus"), {1, 2, 3}, fake);
  EXPECT_EQ(r.forwards, 20);
  ASSERT_EQ(fake.calls.size(), 20u);
  for (size_t i = 0; i < 13; ++i) {
    EXPECT_TRUE(fake.calls[i].output_rows.empty()) << i;
    EXPECT_EQ(r.canvases[i], masks_then({}, 8)) << i;
  }
  const SequenceForward& f = fake.calls[13];
  EXPECT_EQ(f.cache, nullptr);
  EXPECT_EQ(f.rule.kind, AttentionKind::kBidirectional);
  EXPECT_EQ(f.tokens, masks_then({1, 2, 3}, 11));
  EXPECT_EQ(f.output_rows, (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8, 9})) << "token j <- row j-1";
  EXPECT_EQ(f.rng_positions, (std::vector<int32_t>{3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(f.sampler.order, FilterOrder::kTemperatureTopPTopK);
  EXPECT_EQ(r.canvases[13], masks_then({token_at(3)}, 8)) << "equal confidence: lowest position";
  EXPECT_EQ(r.ids, (std::vector<int32_t>{token_at(3), token_at(4), token_at(5), token_at(6),
                                         token_at(7), token_at(8), token_at(9), token_at(10)}));
}

TEST(DreamDecoder, EachAlgorithmRanksByItsConfidence) {
  // gen 4 over 2 steps: the first step unmasks 1 of 4 (int(4 * 0.4995)), the second the rest.
  // Position 3 has the highest p, 4 the highest margin, 5 the lowest entropy.
  auto script = [](const SequenceForward&, int32_t pos) {
    TokenStats s = stats(token_at(pos), 0.2f);
    s.margin_filtered = 0.1f;
    s.entropy_filtered = 3.0f;
    if (pos == 3) s.p_token = 0.9f;
    if (pos == 4) s.margin_filtered = 0.8f;
    if (pos == 5) s.entropy_filtered = 0.5f;
    return s;
  };
  const std::vector<std::pair<std::string, int32_t>> want = {
      {"maskgit_plus", 3}, {"topk_margin", 4}, {"entropy", 5}};
  for (const auto& [alg, pos] : want) {
    FakeBackend fake(script);
    const auto r = run(dream_config(), dream_params(4, 2, alg), {1, 2, 3}, fake);
    std::vector<int32_t> first(4, kMask);
    first[static_cast<size_t>(pos - 3)] = token_at(pos);
    EXPECT_EQ(r.canvases.front(), first) << alg;
    EXPECT_EQ(r.forwards, 2) << alg;
    // alg_temp -> 0: softmax(conf / alg_temp) concentrates on the top confidence.
    DecodeParams p = dream_params(4, 2, alg);
    p.alg_temp = 1e-6f;
    FakeBackend cold(script);
    EXPECT_EQ(run(dream_config(), p, {1, 2, 3}, cold).canvases.front(), first) << alg;
  }
}

TEST(DreamDecoder, OriginAsksOnlyForTheRowsItTransfers) {
  FakeBackend fake([](const SequenceForward&, int32_t pos) { return stats(token_at(pos), 0.5f); });
  DecodeParams p = dream_params(12, 4, "origin");
  p.seed = 3;
  const auto r = run(dream_config(), p, {1, 2}, fake);
  ASSERT_EQ(fake.calls.size(), 4u);
  size_t decided = 0;
  for (size_t i = 0; i < 4; ++i) {
    const auto& rows = fake.calls[i].rng_positions;
    decided += rows.size();
    const auto masks_left = std::count(r.canvases[i].begin(), r.canvases[i].end(), kMask);
    EXPECT_EQ(static_cast<size_t>(masks_left), 12 - decided) << "step " << i;
    for (int32_t j : rows) EXPECT_EQ(r.canvases[i][static_cast<size_t>(j - 2)], token_at(j));
  }
  EXPECT_EQ(decided, 12u) << "the last step transfers every mask left";
  EXPECT_LT(fake.calls[0].rng_positions.size(), 12u);
}

// ---------------------------------------------------------------------------------- parameters

TEST(FullDiffusionParams, FamilyDefaults) {
  DecodeParams none;
  const auto l = resolve_decode_params(llada_config(), none, 3);
  EXPECT_EQ(l.strategy, "full");
  EXPECT_EQ(l.max_tokens, 128);
  EXPECT_EQ(l.block_length, 32);
  EXPECT_EQ(l.steps, 128);
  EXPECT_EQ(l.remasking, "low_confidence");
  EXPECT_EQ(l.sampler.temperature, 0.0f);
  const auto d = resolve_decode_params(dream_config(), none, 3);
  EXPECT_EQ(d.strategy, "full");
  EXPECT_EQ(d.max_tokens, 256);
  EXPECT_EQ(d.steps, 256);
  EXPECT_EQ(d.alg, "entropy");
  EXPECT_EQ(d.sampler.order, FilterOrder::kTemperatureTopPTopK);
  EXPECT_EQ(d.sampler.method, SampleMethod::kInverseCdf);
  DecodeParams small;
  small.max_tokens = 16;
  EXPECT_EQ(resolve_decode_params(llada_config(), small, 3).block_length, 16);
}

TEST(FullDiffusionParams, BadInputIsNamed) {
  auto expect = [](const ModelConfig& c, DecodeParams p, const std::string& needle) {
    try {
      resolve_decode_params(c, p, 3);
      ADD_FAILURE() << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const ModelConfig l = llada_config(), d = dream_config();
  expect(l, llada_params(100, 32, 0), "--block-length 32 must divide --max-tokens 100");
  expect(l, llada_params(64, 16, 6), "--steps 6 must be a multiple of the number of blocks 4");
  expect(l, llada_params(16, 4, 32), "--steps 32 exceeds --max-tokens 16");
  expect(l, llada_params(16, 4, -4), "--steps must be positive");
  auto p = llada_params(16, 4, 16);
  p.cfg_scale = -1;
  expect(l, p, "--cfg-scale must be >= 0");
  p = llada_params(16, 4, 16);
  p.remasking = "low_confidence_dynamic";
  expect(l, p, "--remasking 'low_confidence_dynamic'");
  p = llada_params(16, 4, 16);
  p.sampler.top_k = 5;
  expect(l, p, "--top-k and --top-p do not apply to LLaDA");
  p = llada_params(16, 4, 16);
  p.threshold = 0.9f;
  expect(l, p, "--threshold does not apply");
  p = llada_params(16, 4, 16);
  p.alg = "entropy";
  expect(l, p, "--alg applies to Dream");
  p = llada_params(16, 4, 16);
  p.confidence_eos_eot_inf = true;
  ModelConfig no_eot = l;
  no_eot.eot_token_id = -1;
  expect(no_eot, p, "needs the end-of-turn token id");

  expect(d, dream_params(16, 16, "confidence"), "--alg 'confidence'");
  auto q = dream_params(16, 16, "origin");
  q.alg_temp = 0.5f;
  expect(d, q, "--alg-temp does not apply to --alg origin");
  q = dream_params(16, 16, "entropy");
  q.alg_temp = -1;
  expect(d, q, "--alg-temp must be >= 0");
  q = dream_params(16, 16, "entropy");
  q.block_length = 4;
  expect(d, q, "--block-length does not apply to Dream");
  q = dream_params(16, 16, "entropy");
  q.cfg_scale = 1;
  expect(d, q, "--cfg-scale applies to LLaDA");
  q = dream_params(16, 16, "entropy");
  q.remasking = "random";
  expect(d, q, "--remasking does not apply to Dream");
  q = dream_params(16, -1, "entropy");
  expect(d, q, "--steps must be positive");

  ModelConfig sdar = l;
  sdar.family = "sdar";
  sdar.block_size = 4;
  p = DecodeParams{};
  p.strategy = "block";
  p.alg = "entropy";
  expect(sdar, p, "--alg applies to Dream full diffusion only, not --strategy block");
  p = DecodeParams{};
  p.strategy = "block";
  p.logits_eos_inf = true;
  expect(sdar, p, "--logits-eos-inf applies to LLaDA");
  p = DecodeParams{};
  p.strategy = "block";
  expect(l, p,
         "'block' is not available for llada checkpoints (available: full, d2cache, fastdllm, "
         "dllmcache)");
}

TEST(FullDiffusionParams, MaskTokenInThePromptIsRefused) {
  const ModelConfig c = llada_config();
  const auto p = resolve_decode_params(c, llada_params(8, 4, 8), 3);
  EXPECT_THROW(make_decoder(c, p, {1, kMask, 2}), Error);
}

}  // namespace
}  // namespace dllm
