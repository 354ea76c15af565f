// The CUDA backend against the CPU reference: logits on every fixture and rule, the forward
// contract (cached prefix, write-at-slots, custom masks, slot lists, batches), greedy decoding
// trajectories, and a larger random model with a long cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "backend/backend.h"
#include "cuda_test_util.h"
#include "decode/decoder.h"
#include "io/json_file.h"
#include "io/npy.h"
#include "model/random_model.h"
#include "support/decision_trace.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using test::rel_error;

SequenceForward request(std::vector<int32_t> ids, std::vector<int32_t> pos, AttentionRule rule) {
  SequenceForward f;
  f.tokens = std::move(ids);
  f.positions = std::move(pos);
  f.rule = std::move(rule);
  f.want_logits = true;
  f.output_rows.resize(f.tokens.size());
  std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
  return f;
}

const char* kFixtures[] = {"sdar-tiny",         "wedlm-qwen3-tiny", "wedlm-qwen25-tiny",
                           "fast-dllm-v2-tiny", "dream-tiny",       "llada-tiny",
                           "llada2-tiny"};

TEST(CudaBackend, LogitsMatchCpuAndTransformersOnEveryFixture) {
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    const auto dir = test::model_fixture(name);
    auto model = Model::load(dir);
    auto gpu = make_cuda_backend(*model);
    auto cpu = make_cpu_backend(*model);
    for (const auto& c : read_json_file(dir / "cases.json")["cases"]) {
      auto f =
          request(c["ids"].get<std::vector<int32_t>>(), c["positions"].get<std::vector<int32_t>>(),
                  AttentionRule::parse(c["attention"]));
      const auto g = gpu->forward(std::span(&f, 1))[0].logits;
      const auto h = cpu->forward(std::span(&f, 1))[0].logits;
      const auto ref = read_npy(dir / c["logits"].get<std::string>()).f32;
      EXPECT_LE(rel_error(g, h), 1e-2) << c["logits"];
      EXPECT_LE(rel_error(g, ref), 1e-2) << c["logits"];
    }
  }
}

// The same sequence of requests on both backends must give the same rows.
TEST(CudaBackend, ForwardContractMatchesCpu) {
  auto model = Model::load(test::model_fixture("sdar-tiny"));
  auto gpu = make_cuda_backend(*model);
  auto cpu = make_cpu_backend(*model);
  auto gc = gpu->create_cache(4), hc = cpu->create_cache(4);  // both must grow
  const std::vector<int32_t> ids = {3, 99, 17, 250, 5, 8, 290, 290, 41, 7, 11, 12};
  auto run = [&](SequenceForward f) {
    SequenceForward a = f, b = f;
    a.cache = f.cache ? gc.get() : nullptr;
    b.cache = f.cache ? hc.get() : nullptr;
    const auto g = gpu->forward(std::span(&a, 1))[0].logits;
    const auto h = cpu->forward(std::span(&b, 1))[0].logits;
    EXPECT_LE(rel_error(g, h), 1e-2);
    EXPECT_EQ(gc->length(), hc->length());
  };
  auto cached = [&](SequenceForward f) {
    f.cache = hc.get();
    return f;
  };
  // Prefill (append) under block-causal, then a denoising block, then write-at-slots, custom mask,
  // and a visible slot list.
  auto pre = cached(request({ids.begin(), ids.begin() + 8}, {0, 1, 2, 3, 4, 5, 6, 7},
                            AttentionRule::block_causal(4)));
  pre.write = CacheWrite::kAppend;
  run(pre);
  run(cached(
      request({ids.begin() + 8, ids.end()}, {8, 9, 10, 11}, AttentionRule::block_causal(4))));
  auto at = cached(request({42, 43}, {2, 6}, AttentionRule::bidirectional()));
  at.write = CacheWrite::kAtSlots;
  at.write_slots = {2, 6};
  run(at);
  std::vector<uint8_t> mask(2 * 10);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i * 7) % 3 != 0;
  run(cached(request({5, 6}, {8, 9}, AttentionRule::custom(mask))));
  // Every query sees the whole cache (the backend then sends only the query columns).
  std::vector<uint8_t> verifier_like(2 * 10, 1);
  verifier_like[9] = 0;  // query 0 does not see query 1
  run(cached(request({5, 6}, {8, 9}, AttentionRule::custom(verifier_like))));
  auto sub = cached(request({5, 6}, {8, 9}, AttentionRule::causal()));
  sub.visible_slots = std::vector<int32_t>{7, 1, 4};
  run(sub);
  auto partial = cached(request({9, 10, 290}, {8, 9, 10}, AttentionRule::causal()));
  partial.write = CacheWrite::kAppend;
  partial.append_count = 2;
  run(partial);
  run(request(ids, {11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, AttentionRule::causal()));  // no cache
}

TEST(CudaBackend, BatchEqualsSingles) {
  auto model = Model::load(test::model_fixture("dream-tiny"));
  auto gpu = make_cuda_backend(*model);
  std::vector<SequenceForward> batch = {
      request({1, 2, 3, 4, 5}, {0, 1, 2, 3, 4}, AttentionRule::bidirectional()),
      request({7, 8}, {40, 41}, AttentionRule::causal()),
      request({9, 10, 11}, {0, 1, 2}, AttentionRule::block_causal(2))};
  batch[0].output_rows = {4, 1};
  const auto together = gpu->forward(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto alone = gpu->forward(std::span(&batch[i], 1))[0].logits;
    EXPECT_LE(rel_error(together[i].logits, alone), 1e-5) << i;
  }
}

// Greedy decoding on the GPU follows the CPU step for step. The two decoders run in lockstep on
// identical plans; where bf16 legitimately changes a decision the divergence must come from a
// near-tie in the CPU's own numbers (two confidences, a confidence and the threshold, or the top
// two tokens of a row within 3% of each other), and the test prints that margin.
TEST(CudaBackend, GreedyGenerationMatchesCpu) {
  int cases = 0, identical = 0;
  for (const char* name : {"sdar-tiny", "fast-dllm-v2-tiny"}) {
    const auto fx =
        read_json_file(test::fixtures_dir() / "trajectories" / (std::string(name) + ".json"));
    auto model = Model::load(test::model_fixture(fx["model"]));
    auto gpu = make_cuda_backend(*model);
    auto cpu = make_cpu_backend(*model);
    for (const auto& c : fx["cases"]) {
      const auto& p = c["params"];
      if (p["temperature"].get<float>() > 0 || p["top_k"].get<int>() != 0) continue;
      SCOPED_TRACE(name + std::string(" ") + c["name"].get<std::string>());
      DecodeParams d;
      d.strategy = p["strategy"];
      d.max_tokens = p["max_tokens"];
      d.block_length = p["block_length"];
      d.steps = p["steps"];
      d.threshold = p["threshold"];
      d.remasking = p["remasking"];
      d.sub_block_length = p["sub_block_length"];
      d.sampler.top_p = p["top_p"];
      const auto prompt = c["prompt"].get<std::vector<int32_t>>();
      d = resolve_decode_params(model->config(), d, int64_t(prompt.size()));
      auto dc = make_decoder(model->config(), d, prompt),
           dg = make_decoder(model->config(), d, prompt);
      auto kc = cpu->create_cache(dc->cache_capacity()),
           kg = gpu->create_cache(dg->cache_capacity());
      ++cases;
      bool diverged = false;
      test::DecodeTrace tc, tg;  // each backend's forwards
      for (int step = 0; step < 500; ++step) {
        SequenceForward fc, fg;
        fc.cache = kc.get();
        fg.cache = kg.get();
        const bool more = dc->plan(fc);
        ASSERT_EQ(more, dg->plan(fg));
        if (!more) break;
        ASSERT_EQ(fc.tokens, fg.tokens) << "step " << step;
        const auto rc = cpu->forward(std::span(&fc, 1))[0];
        const auto rg = gpu->forward(std::span(&fg, 1))[0];
        dc->observe(rc);
        dg->observe(rg);
        tc.push_back(test::record_of(rc));
        tg.push_back(test::record_of(rg));
        if (dc->canvas() == dg->canvas()) continue;
        // Divergence: the forwards' numbers, and the CPU's closest call among its decisions.
        test::expect_near_tie(
            std::string(name) + " " + c["name"].get<std::string>() + " GPU vs CPU",
            test::parting_at(size_t(step), tg, tc, d), d);
        diverged = true;
        break;
      }
      if (!diverged) {
        EXPECT_EQ(dg->final_tokens().size() >= dc->final_tokens().size(), true);
        ++identical;
      }
    }
  }
  std::printf("  greedy GPU trajectories identical to CPU: %d of %d\n", identical, cases);
  EXPECT_GE(cases, 15);
  // The random tiny fixtures have many near-ties (confidences of ~1/300): several trajectories
  // diverge legitimately; each divergence was checked above. Most still match to the end.
  EXPECT_GE(identical * 10, cases * 4);
}

// A larger random model: head_dim 128, GQA 4, a 1000-token cache and a 32-token block — many key
// tiles and splits per head.
TEST(CudaBackend, LargerRandomModelWithLongCache) {
  const nlohmann::json config = {{"architectures", {"SDARForCausalLM"}},
                                 {"model_type", "sdar"},
                                 {"vocab_size", 5000},
                                 {"hidden_size", 512},
                                 {"intermediate_size", 1024},
                                 {"num_hidden_layers", 2},
                                 {"num_attention_heads", 8},
                                 {"num_key_value_heads", 2},
                                 {"head_dim", 128},
                                 {"rms_norm_eps", 1e-6},
                                 {"rope_theta", 1000000.0},
                                 {"tie_word_embeddings", true},
                                 {"mask_token_id", 4999},
                                 {"block_size", 32}};
  auto model = make_random_model(config, 3);
  auto gpu = make_cuda_backend(*model);
  auto cpu = make_cpu_backend(*model);
  auto gc = gpu->create_cache(1100), hc = cpu->create_cache(1100);
  std::vector<int32_t> ids, pos;
  for (int i = 0; i < 1024; ++i) {
    ids.push_back((i * 7919) % 4999);
    pos.push_back(i);
  }
  for (auto [cache, backend] : {std::pair{gc.get(), gpu.get()}, std::pair{hc.get(), cpu.get()}}) {
    auto pre = request(ids, pos, AttentionRule::block_causal(32));
    pre.cache = cache;
    pre.write = CacheWrite::kAppend;
    pre.want_logits = false;
    pre.output_rows.clear();
    backend->forward(std::span(&pre, 1));
  }
  std::vector<int32_t> block(32, 4999), bpos(32);
  std::iota(bpos.begin(), bpos.end(), 1024);
  auto f = request(block, bpos, AttentionRule::block_causal(32));
  SequenceForward a = f, b = f;
  a.cache = gc.get();
  b.cache = hc.get();
  EXPECT_LE(
      rel_error(gpu->forward(std::span(&a, 1))[0].logits, cpu->forward(std::span(&b, 1))[0].logits),
      2e-2);
}

}  // namespace
}  // namespace dllm

namespace dllm {
namespace {

// Denoising steps replayed from captured CUDA graphs give the same statistics as direct launches,
// while the context grows between steps (the key count is read on the device).
TEST(CudaBackend, GraphReplayEqualsDirectLaunches) {
  auto model = Model::load(test::model_fixture("sdar-tiny"));
  setenv("DLLM_CUDA_GRAPHS", "0", 1);
  auto direct = make_cuda_backend(*model);
  unsetenv("DLLM_CUDA_GRAPHS");
  auto graphed = make_cuda_backend(*model);
  auto cd = direct->create_cache(64), cg = graphed->create_cache(64);
  int checked = 0;
  for (int step = 0; step < 6; ++step) {
    const int32_t base = 4 * step;
    for (auto [backend, cache] :
         {std::pair{direct.get(), cd.get()}, std::pair{graphed.get(), cg.get()}}) {
      if (step > 0) {  // commit the previous block so the context grows
        SequenceForward commit;
        commit.cache = cache;
        commit.tokens = {11, 12, 13, 14};
        commit.positions = {base - 4, base - 3, base - 2, base - 1};
        commit.rule = AttentionRule::block_causal(4);
        commit.write = CacheWrite::kAppend;
        backend->forward(std::span(&commit, 1));
      }
    }
    for (int rep = 0; rep < 3; ++rep) {  // first direct, second captured, third replayed
      SequenceForward f;
      f.tokens = {290, 290, 290, 5};
      f.positions = {base, base + 1, base + 2, base + 3};
      f.rule = AttentionRule::block_causal(4);
      f.output_rows = {0, 1, 2};
      f.want_stats = true;
      f.sampler.banned_tokens = {290};
      SequenceForward a = f, b = f;
      a.cache = cd.get();
      b.cache = cg.get();
      const auto ra = direct->forward(std::span(&a, 1))[0].stats;
      const auto rb = graphed->forward(std::span(&b, 1))[0].stats;
      ASSERT_EQ(ra.size(), rb.size());
      for (size_t i = 0; i < ra.size(); ++i) {
        EXPECT_EQ(ra[i].argmax, rb[i].argmax) << "step " << step << " rep " << rep;
        EXPECT_NEAR(ra[i].p_max, rb[i].p_max, 1e-4);
        EXPECT_NEAR(ra[i].entropy, rb[i].entropy, 1e-3);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 6 * 3 * 3);
}

// WeDLM windows (causal rows appended after the committed prefix, a fixed 2W shape when padded)
// replay captured graphs: every step's statistics equal those of direct launches on a twin cache
// fed the same forwards, and both caches end equally long.
TEST(CudaBackend, WedlmWindowGraphsEqualDirectLaunches) {
  auto model = Model::load(test::model_fixture("wedlm-qwen3-tiny"));
  setenv("DLLM_CUDA_GRAPHS", "0", 1);
  auto direct = make_cuda_backend(*model);
  unsetenv("DLLM_CUDA_GRAPHS");
  auto graphed = make_cuda_backend(*model);
  for (const float tau : {-INFINITY, 5.3f}) {  // one token per step; multi-token commits
    DecodeParams d;
    d.strategy = "wedlm";
    d.max_tokens = 40;
    d.window = 8;
    d.entropy_threshold = tau;
    const std::vector<int32_t> prompt = {17, 4, 230, 88, 5};
    d = resolve_decode_params(model->config(), d, int64_t(prompt.size()));
    auto da = make_decoder(model->config(), d, prompt),
         db = make_decoder(model->config(), d, prompt);
    auto ka = direct->create_cache(da->cache_capacity()),
         kb = graphed->create_cache(db->cache_capacity());
    int steps = 0;
    for (; steps < 200; ++steps) {
      SequenceForward fa, fb;
      fa.cache = ka.get();
      fb.cache = kb.get();
      const bool more_a = da->plan(fa), more_b = db->plan(fb);
      ASSERT_EQ(more_a, more_b);
      if (!more_a || da->final_tokens().size() >= 40) break;
      ASSERT_EQ(fa.tokens, fb.tokens) << "step " << steps;
      da->observe(direct->forward(std::span(&fa, 1))[0]);
      db->observe(graphed->forward(std::span(&fb, 1))[0]);
      ASSERT_EQ(da->canvas(), db->canvas()) << "step " << steps;
    }
    EXPECT_GT(steps, 5) << "enough steps to capture and replay";
    EXPECT_EQ(da->final_tokens(), db->final_tokens());
    EXPECT_EQ(ka->length(), kb->length());
  }
}

}  // namespace
}  // namespace dllm
