// MMInference sparse prefill in the CUDA forward (backend/cuda/cuda_sparse_prefill.cpp) against
// the CPU backend's (cpu_sparse_prefill.cpp, itself checked against the plain forward under each
// pattern's mask, tests/backend/sparse_prefill_forward_test.cpp), on the CPU tests' fixtures:
//   - the prefill logits of every pattern (sdar-tiny, 400 tokens, causal and block-causal B = 4)
//     track the CPU's: tight for the data-independent patterns (the same mask, only bf16 vs fp32
//     differs), looser for the estimated ones (the GPU estimates from bf16 Q/K, so keys near a
//     top-k boundary may swap); the GPU's must be nearer the CPU's sparse logits than the dense
//     ones;
//   - a sparse-prefill sequence batched with a dense prefill and a decoding step equals each
//     alone, to the bit;
//   - greedy generation through the engine (tiny-block, the embedded trained model) with a
//     sparse config gives the CPU's tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <numeric>

#include "attention/sparse_prefill_patterns.h"
#include "backend/backend.h"
#include "cuda_test_util.h"
#include "dllm/engine.h"
#include "support/sparse_prefill_config_file.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using test::rel_error;

constexpr int kTokens = 400;

std::vector<int32_t> prompt_ids(int n, int salt = 0) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 37 + 11 + salt * 101) % 300);
  return ids;
}

SequenceForward prefill(const std::vector<int32_t>& ids, int block) {
  SequenceForward f;
  f.tokens = ids;
  f.positions.resize(ids.size());
  std::iota(f.positions.begin(), f.positions.end(), 0);
  f.rule = block == 1 ? AttentionRule::causal() : AttentionRule::block_causal(block);
  f.want_logits = true;
  f.output_rows = f.positions;
  return f;
}

// Every head of every layer runs `p`; the vision span and a modality map of alternating
// 30-token text / 70-token "vision" segments (the boundary forms need one).
std::shared_ptr<SparsePrefillRequest> everywhere(const HeadPattern& p, const ModelConfig& c,
                                                 int32_t n) {
  auto config = std::make_shared<SparsePrefillConfig>();
  config->layers.resize(static_cast<size_t>(c.num_layers));
  for (auto& layer : config->layers) {
    layer.given = true;
    layer.heads.assign(static_cast<size_t>(c.num_heads), p);
    layer.head_given.assign(static_cast<size_t>(c.num_heads), true);
  }
  auto req = std::make_shared<SparsePrefillRequest>();
  req->config = config;
  req->vision_begin = 10;
  req->vision_end = n - 20;
  for (int32_t i = 0; i < n; ++i) req->modality.push_back(i % 100 < 30 ? 0 : 1);
  return req;
}

struct NamedPattern {
  std::string name;
  HeadPattern p;
  bool estimated;  // built from the layer's Q / K
};

std::vector<NamedPattern> patterns() {
  std::vector<NamedPattern> ps;
  HeadPattern p;
  p.kind = PatternKind::kAShape;
  p.sink = 4;
  p.local = 20;
  ps.push_back({"a_shape", p, false});
  p.kind = PatternKind::kTriShape;
  p.n_last = 17;
  ps.push_back({"tri_shape", p, false});
  p = HeadPattern{};
  p.kind = PatternKind::kGrid;
  p.grid = {9, 2, true, true, 12};
  ps.push_back({"grid", p, false});
  p = HeadPattern{};
  p.kind = PatternKind::kVerticalSlash;
  p.vertical = 30;
  p.slash = 50;
  ps.push_back({"vertical_slash", p, true});
  p.boundary = BoundaryKind::kQ;
  ps.push_back({"q_boundary", p, true});
  p.boundary = BoundaryKind::k2D;
  ps.push_back({"2d_boundary", p, true});
  p = HeadPattern{};
  p.kind = PatternKind::kBlockSparse;
  p.top_blocks = 2;
  ps.push_back({"block_sparse", p, true});
  p = HeadPattern{};
  p.kind = PatternKind::kGrid;
  p.grid = {0, 0, false, true, 16};  // stride and phase searched online
  ps.push_back({"grid_searched", p, true});
  return ps;
}

std::vector<float> logits(Backend& b, const SequenceForward& f) {
  return b.forward(std::span(&f, 1))[0].logits;
}

TEST(CudaSparsePrefillForward, PrefillLogitsTrackTheCpu) {
  auto model = Model::load(test::model_fixture("sdar-tiny"));
  auto gpu = make_cuda_backend(*model);
  auto cpu = make_cpu_backend(*model);
  const auto ids = prompt_ids(kTokens);
  for (int block : {1, 4}) {
    const SequenceForward dense = prefill(ids, block);
    const auto cpu_dense = logits(*cpu, dense);
    const double dense_gap = rel_error(logits(*gpu, dense), cpu_dense);
    EXPECT_LE(dense_gap, 2e-2) << "dense prefill, GPU vs CPU, block " << block;
    for (const NamedPattern& np : patterns()) {
      SCOPED_TRACE(np.name + " block " + std::to_string(block));
      SequenceForward f = dense;
      f.sparse_prefill = everywhere(np.p, model->config(), kTokens);
      const auto g = logits(*gpu, f), c = logits(*cpu, f);
      const double gap = rel_error(g, c), from_dense = rel_error(g, cpu_dense);
      std::printf("  %-15s block %d: GPU vs CPU %.2e (dense %.2e), GPU sparse vs CPU dense %.2e\n",
                  np.name.c_str(), block, gap, dense_gap, from_dense);
      // Data-independent patterns: the same mask on both backends, only the precision differs.
      // Estimated ones: near-tie keys may swap between bf16 and fp32 estimates.
      EXPECT_LE(gap, np.estimated ? 5e-2 : 2e-2);
      EXPECT_LT(gap, from_dense) << "the GPU's sparse prefill must be nearer the CPU's sparse "
                                    "prefill than the dense one";
    }
  }
}

// A sparse-prefill sequence, a dense prefill and a decoding step over a cached prefix in one
// forward: each gets what it gets alone, to the bit.
TEST(CudaSparsePrefillForward, BatchedWithOtherRequestsEqualsAlone) {
  auto model = Model::load(test::model_fixture("sdar-tiny"));
  auto gpu = make_cuda_backend(*model);
  const ModelConfig& c = model->config();
  HeadPattern vs;
  vs.kind = PatternKind::kVerticalSlash;
  vs.vertical = 30;
  vs.slash = 50;
  HeadPattern a;
  a.kind = PatternKind::kAShape;
  a.sink = 4;
  a.local = 32;
  auto cache = gpu->create_cache(512);
  auto make = [&]() {
    std::vector<SequenceForward> fs;
    fs.push_back(prefill(prompt_ids(kTokens, 1), 4));
    fs[0].sparse_prefill = everywhere(vs, c, kTokens);
    fs.push_back(prefill(prompt_ids(300, 2), 4));  // dense
    SequenceForward step = prefill(prompt_ids(8, 3), 4);
    std::iota(step.positions.begin(), step.positions.end(), 200);
    step.cache = cache.get();
    step.output_rows = {0, 1, 2, 3, 4, 5, 6, 7};
    fs.push_back(step);
    fs.push_back(prefill(prompt_ids(333, 4), 1));
    fs[3].sparse_prefill = everywhere(a, c, 333);
    return fs;
  };
  // The decoding step's prefix: 200 cached tokens.
  SequenceForward pre = prefill(prompt_ids(200, 5), 4);
  pre.cache = cache.get();
  pre.write = CacheWrite::kAppend;
  pre.want_logits = false;
  pre.output_rows.clear();
  gpu->forward(std::span(&pre, 1));
  const auto fs = make();
  std::vector<std::vector<float>> alone;
  for (const SequenceForward& f : fs) alone.push_back(logits(*gpu, f));
  const auto together = gpu->forward(fs);
  for (size_t i = 0; i < fs.size(); ++i)
    EXPECT_EQ(together[i].logits, alone[i]) << "sequence " << i;
  EXPECT_NE(alone[0], logits(*gpu, prefill(prompt_ids(kTokens, 1), 4)))
      << "the sparse prefill must change sequence 0";
}

std::string write_config(const std::string& name, const std::string& per_head) {
  const auto path = test::temp_dir("cuda_sparse_prefill_engine") / name;
  test::write_tiny_block_sparse_config(path, per_head);
  return path.string();
}

// Greedy generation with a sparse prefill on the trained tiny-block model: the GPU's tokens are
// the CPU's (a long prompt, so that the patterns drop keys).
TEST(CudaSparsePrefillForward, GenerationMatchesTheCpu) {
  std::string filler;
  for (int i = 0; i < 40; ++i) filler += "The number " + std::to_string(i * 7) + " is here. ";
  Request r;
  r.messages_json = R"([{"role": "user", "content": ")" + filler + R"(What is 123 + 456?"}])";
  r.max_tokens = 16;
  for (const char* entry :
       {R"(["stream_llm", 8, 64])", R"(["vs_attn", 30, 60, 64])", R"(["tri_shape", 8, 64, 32])"}) {
    SCOPED_TRACE(entry);
    std::vector<RequestResult> results;
    for (const char* device : {"cpu", "cuda"}) {
      EngineConfig c;
      c.model = (test::models_dir() / "tiny-block").string();
      c.device = device;
      c.sparse_prefill = write_config("generation.json", entry);
      Engine e(c);
      results.push_back(e.generate(r));
    }
    EXPECT_GT(results[0].prompt_ids.size(), 200u) << "the prompt must be longer than the bands";
    EXPECT_EQ(results[1].token_ids, results[0].token_ids)
        << "CPU: " << results[0].text << "\nGPU: " << results[1].text;
    std::printf("  %s: \"%s\"\n", entry, results[1].text.c_str());
  }
}

}  // namespace
}  // namespace dllm
