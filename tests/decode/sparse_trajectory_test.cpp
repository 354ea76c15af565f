// Block-diffusion decoding with sparse attention (MAGE, Quest, SparseD) against the independent
// NumPy reference tools/reference_sparse_attention.py: the embedded SDAR model models/tiny-block
// and the Fast-dLLM v2 fixture, greedy, k small enough that the selection changes the tokens; MAGE
// on the llada2-tiny fixture against tools/reference_llada2_methods.py.
// Checked: the canvas after every forward and the generated ids.
#include <gtest/gtest.h>

#include "engine/engine_core.h"
#include "io/json_file.h"
#include "support/sparse_fixture_params.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

std::filesystem::path model_dir(const std::string& name) {
  return name == "tiny-block" ? test::models_dir() / name : test::model_fixture(name);
}

TEST(SparseTrajectory, MatchesReferenceAfterEveryForward) {
  const auto fx = read_json_file(test::fixtures_dir() / "sparse" / "trajectories.json");
  ASSERT_GE(fx["cases"].size(), 6u);
  int differ_from_exact = 0;
  for (const auto& c : fx["cases"]) {
    const std::string name =
        c["model"].get<std::string>() + " " + c["sparse"]["method"].get<std::string>();
    SCOPED_TRACE(name);
    auto model = Model::load(model_dir(c["model"]));
    auto backend = make_cpu_backend(*model);
    EngineCore engine(*model, *backend);
    DecodeParams p;
    p.strategy = "block";
    p.max_tokens = c["max_tokens"];
    p.block_length = c["block_length"];
    if (c.contains("sub_block_length")) p.sub_block_length = c["sub_block_length"];
    p.threshold = 0.9f;
    p.sampler.temperature = 0;
    p.sparse = test::sparse_params_from(c["sparse"]);
    GenerationRequest req;
    req.prompt = c["prompt"].get<std::vector<int32_t>>();
    req.params = resolve_decode_params(model->config(), p, int64_t(req.prompt.size()));
    req.stop_ids = {};  // the reference decodes to max_tokens
    std::vector<std::vector<int32_t>> canvases;
    const auto r = engine.generate(
        req, [](std::span<const int32_t>) {},
        [&](const Decoder& d, auto) { canvases.push_back(d.canvas()); });
    const auto& e = c["expected"];
    EXPECT_EQ(r.ids, e["ids"].get<std::vector<int32_t>>());
    const auto want = e["canvases"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(canvases.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(canvases[i], want[i]) << "after forward " << i + 1;
    // The same request with exact attention.
    req.params.sparse = SparseParams{};
    const auto exact = engine.generate(req, [](std::span<const int32_t>) {});
    differ_from_exact += exact.ids != r.ids;
  }
  EXPECT_GE(differ_from_exact, 5) << "k must be small enough that the selection changes tokens";
}

// LLaDA2.0 block diffusion with MAGE (Quest, SparseD) and LLaDA2.1 token editing with MAGE
// (Quest) on the llada2-tiny fixture against tools/reference_llada2_methods.py (its own LLaDA2
// forward over a prefix KV cache, the selection of reference_sparse_attention.py): greedy, sampled,
// the HF-2.0 quirk, blocks of 32 and 8, stop at EOS, post-mask editing steps, and k covering every
// prefix (exact).
TEST(SparseTrajectory, Llada2MatchesReferenceAfterEveryForward) {
  const auto fx = read_json_file(test::fixtures_dir() / "sparse" / "llada2-trajectories.json");
  auto model = Model::load(test::model_fixture(fx["model"]));
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  ASSERT_GE(fx["cases"].size(), 11u);
  int differ_from_exact = 0;
  for (const auto& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto& p = c["params"];
    const DecodeParams d = test::llada2_sparse_params_from(c);
    GenerationRequest req;
    req.prompt = c["prompt"].get<std::vector<int32_t>>();
    req.params = resolve_decode_params(model->config(), d, int64_t(req.prompt.size()));
    req.stop_ids = p["stop_ids"].get<std::vector<int64_t>>();
    std::vector<std::vector<int32_t>> canvases;
    const auto r = engine.generate(
        req, [](std::span<const int32_t>) {},
        [&](const Decoder& dec, auto) { canvases.push_back(dec.canvas()); });
    const auto& e = c["expected"];
    EXPECT_EQ(r.ids, e["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(r.finish_reason, e["finish_reason"]);
    EXPECT_EQ(r.stats.forwards, e["forwards"].get<int64_t>());
    const auto want = e["canvases"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(canvases.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(canvases[i], want[i]) << "after forward " << i + 1;
    req.params.sparse = SparseParams{};
    const auto exact = engine.generate(req, [](std::span<const int32_t>) {});
    EXPECT_EQ(exact.ids != r.ids, c["differs_from_exact"].get<bool>());
    differ_from_exact += exact.ids != r.ids;
  }
  EXPECT_GE(differ_from_exact, 9) << "k must be small enough that the selection changes tokens";
}

// Greedy block diffusion on models/tiny-block (blocks of 4, 16 tokens) and MAGE at k = 8 from
// layer `exact_layers` on: the setting of the two tests below.
DecodeParams tiny_block_greedy() {
  DecodeParams p;
  p.strategy = "block";
  p.max_tokens = 16;
  p.block_length = 4;
  p.sampler.temperature = 0;
  return p;
}
SparseParams mage_k8(int32_t exact_layers) {
  SparseParams s;
  s.method = SparseMethod::kMage;
  s.k = 8;
  s.exact_layers = exact_layers;
  return s;
}

// Exact layers covering the whole model leave nothing sparse: the same ids as exact attention
// (was an error, "no selection is stored", at the first attending step).
TEST(SparseTrajectory, ExactLayersCoveringTheModelDecodeExactly) {
  auto model = Model::load(test::models_dir() / "tiny-block");
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  DecodeParams p = tiny_block_greedy();
  p.sparse = mage_k8(static_cast<int32_t>(model->config().num_layers));
  GenerationRequest req;
  for (int i = 0; i < 40; ++i) req.prompt.push_back(100 + 7 * i);
  req.params = resolve_decode_params(model->config(), p, int64_t(req.prompt.size()));
  const auto sparse = engine.generate(req);
  req.params.sparse = SparseParams{};
  const auto exact = engine.generate(req);
  EXPECT_EQ(sparse.ids, exact.ids);
  EXPECT_FALSE(exact.ids.empty());
}

// --sparse-recall (MAGE's diagnostic): after each block's first selection every forward
// attends exactly, so the tokens are exact decoding's; the metric is a recall in [0, 1] over
// the blocks' later forwards, k small enough that it is below 1 somewhere.
TEST(SparseTrajectory, RecallDiagnosticKeepsExactTokensAndReportsRecall) {
  auto model = Model::load(test::models_dir() / "tiny-block");
  auto backend = make_cpu_backend(*model);
  EngineCore engine(*model, *backend);
  DecodeParams p = tiny_block_greedy();
  GenerationRequest req;
  for (int32_t i = 0; i < 60; ++i) req.prompt.push_back(100 + (i * 37) % 3000);
  req.stop_ids = {};
  req.params = resolve_decode_params(model->config(), p, int64_t(req.prompt.size()));
  const auto exact = engine.generate(req, [](std::span<const int32_t>) {});
  p.sparse = mage_k8(1);
  p.sparse.measure_recall = true;
  req.params = resolve_decode_params(model->config(), p, int64_t(req.prompt.size()));
  const auto measured = engine.generate(req, [](std::span<const int32_t>) {});
  EXPECT_EQ(measured.ids, exact.ids);
  double recall = -1, steps = -1;
  for (const DecoderMetric& m : measured.stats.decoder_metrics) {
    if (m.name == "mage_recall") recall = m.value;
    if (m.name == "mage_recall_steps") steps = m.value;
  }
  EXPECT_GE(steps, 4) << "every block's later forwards are scored (prefix > k from the start)";
  EXPECT_GT(recall, 0.0);
  EXPECT_LT(recall, 1.0) << "k = 8 of 60+ prefix keys: some later top-k differs";
  // Without the diagnostic MAGE attends through the sets and reports no recall.
  p.sparse.measure_recall = false;
  req.params = resolve_decode_params(model->config(), p, int64_t(req.prompt.size()));
  for (const DecoderMetric& m :
       engine.generate(req, [](std::span<const int32_t>) {}).stats.decoder_metrics)
    EXPECT_NE(m.name.rfind("mage_recall", 0), 0u) << m.name;
}

}  // namespace
}  // namespace dllm
