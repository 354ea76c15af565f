// `dllm bench --sparse-prefill-kernel`: one layer's prefill attention, dense (the faster of the
// same kernel with a dense plan and the forward's batched dense attention — the Hopper wgmma
// kernel at head_dim 128) against each MMInference pattern, on a video-like prompt: a 64-token text
// prefix, 196-token frames each followed by 8 text tokens (timestamps), a 512-token text question.
//   dllm bench --device cuda --shape configs/sdar-8b.json --sparse-prefill-kernel all
//              --prefill-lengths 32768,65536,131072,262144 [--prefill-block 4]
//              [--sparse-prefill CONFIG.json]   (every layer of a searched config, summed)
// Plans are built on the host from random fp32 Q/K of one head (the online estimates included)
// and shared by every head; the kernel runs on random bf16 Q/K/V. The PyTorch SDPA (flash) peer
// on the same shapes: tools/bench_sdpa_prefill.py.
#include "cli/sparse_prefill_bench.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "attention/sparse_prefill_config.h"
#include "attention/sparse_prefill_patterns.h"
#include "backend/backend.h"
#include "cli/cli_util.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/families/family.h"
#include "vision/modality.h"

namespace dllm::cli {

namespace {

constexpr int32_t kFrameTokens = 196, kFrameText = 8, kPrefixText = 64, kQuestionText = 512;

PrefillLayout video_layout(int32_t n, int32_t block_size) {
  PrefillLayout l;
  l.n_tokens = n;
  l.block_size = block_size;
  l.modality.assign(static_cast<size_t>(n), static_cast<uint8_t>(Modality::kText));
  const int32_t vision_end = std::max(kPrefixText, n - kQuestionText);
  for (int32_t r = kPrefixText; r < vision_end; ++r)
    if ((r - kPrefixText) % (kFrameTokens + kFrameText) < kFrameTokens)
      l.modality[static_cast<size_t>(r)] = static_cast<uint8_t>(Modality::kVideo);
  l.vision_begin = kPrefixText;
  l.vision_end = vision_end;
  l.frame_stride = kFrameTokens + kFrameText;
  return l;
}

struct NamedPattern {
  std::string name;
  HeadPattern pattern;
};

// The patterns at the settings the MMInference paper and code use (method-specs §2.1, §2.8).
std::vector<NamedPattern> bench_patterns() {
  std::vector<NamedPattern> ps;
  HeadPattern p;
  ps.push_back({"dense", p});
  p.kind = PatternKind::kAShape;
  p.sink = 128;
  p.local = 4096;
  ps.push_back({"a_shape", p});
  p.kind = PatternKind::kTriShape;
  p.n_last = kQuestionText;
  ps.push_back({"tri_shape", p});
  p.kind = PatternKind::kVerticalSlash;
  p.vertical = 1000;
  p.slash = 2048;
  ps.push_back({"vertical_slash", p});
  p.kind = PatternKind::kBlockSparse;
  p.top_blocks = 100;
  ps.push_back({"block_sparse", p});
  p.kind = PatternKind::kGrid;
  p.grid = {kFrameTokens + kFrameText, 0, false, true, 1024};
  ps.push_back({"grid", p});
  p.grid.hline = true;
  ps.push_back({"grid_hline", p});
  p.kind = PatternKind::kVerticalSlash;
  p.boundary = BoundaryKind::kQ;
  ps.push_back({"q_boundary", p});
  p.boundary = BoundaryKind::k2D;
  ps.push_back({"2d_boundary", p});
  return ps;
}

// The share of the family rule's (row, key) pairs the kernel computes: whole 64-key chunks of
// every span for every row of the tile.
double computed_density(const SparsePrefillPlan& plan) {
  double computed = 0, family = 0;
  const SparseHeadPlan& h = plan.heads.at(0);
  for (const QueryTile& t : h.tiles) {
    for (int32_t i = 0; i < t.row_count; ++i)
      family += sparse_key_limit(h.rows[static_cast<size_t>(t.first_row + i)], plan.n_tokens,
                                 plan.block_size) +
                1;
    for (int32_t s = 0; s < t.span_count; ++s)
      computed += double(kSparseTileRows) *
                  ((h.spans[static_cast<size_t>(t.first_span + s)].count + kSparseKeyBlock - 1) /
                   kSparseKeyBlock * kSparseKeyBlock);
  }
  return computed / family;
}

// Every layer of --sparse-prefill CONFIG.json, timed one after the other (heads with equal
// patterns share one plan): the prefill's attention under the config.
double time_config_layers(const SparsePrefillConfig& config, int layers, int heads, int kv_heads,
                          int d, const PrefillLayout& layout, const HeadQK& qk, int reps,
                          double& density) {
  std::map<std::string, SparseHeadPlan> plans;
  double total_ms = 0, density_sum = 0;
  for (int l = 0; l < layers; ++l) {
    SparsePrefillPlan plan;
    plan.n_tokens = layout.n_tokens;
    plan.block_size = layout.block_size;
    for (int h = 0; h < heads; ++h) {
      SparsePrefillConfig one;
      one.layers.resize(1);
      one.layers[0].given = true;
      one.layers[0].heads = {config.pattern(l, h)};
      one.layers[0].head_given = {true};
      const std::string key = sparse_prefill_config_json(one).dump();
      auto it = plans.find(key);
      if (it == plans.end())
        it = plans.emplace(key, build_head_plan(config.pattern(l, h), layout, qk)).first;
      plan.heads.push_back(it->second);
    }
    density_sum += computed_density(plan);
    total_ms += time_cuda_sparse_prefill(plan, heads, kv_heads, d, reps) / 1e3;
  }
  density = density_sum / layers;
  return total_ms;
}

}  // namespace

nlohmann::json sparse_prefill_bench(const BenchArgs& a, const std::string& device) {
  if (device != "cuda")
    fail("--sparse-prefill-kernel times the CUDA kernel (--device cuda, a GPU)");
  const nlohmann::json j = read_json_file(a.shape);
  const ModelConfig c = find_family(j, a.shape).parse_config(j, a.shape);
  const auto lengths = parse_int_list(a.prefill_lengths, "--prefill-lengths");
  if (a.prefill_block < 1) fail("--prefill-block must be >= 1 (got ", a.prefill_block, ")");
  std::vector<NamedPattern> patterns = bench_patterns();
  if (a.sparse_prefill_kernel != "all") {
    std::vector<NamedPattern> chosen;
    std::stringstream names(a.sparse_prefill_kernel);
    for (std::string name; std::getline(names, name, ',');) {
      auto it = std::find_if(patterns.begin(), patterns.end(),
                             [&](const NamedPattern& p) { return p.name == name; });
      if (it == patterns.end())
        fail("--sparse-prefill-kernel: unknown pattern '", name,
             "' (dense, a_shape, tri_shape, vertical_slash, block_sparse, grid, grid_hline, "
             "q_boundary, 2d_boundary or all)");
      chosen.push_back(*it);
    }
    if (std::none_of(chosen.begin(), chosen.end(), [](auto& p) { return p.name == "dense"; }))
      chosen.insert(chosen.begin(), patterns[0]);  // the baseline every speed-up is against
    patterns = chosen;
  }
  const int heads = static_cast<int>(c.num_heads), kv_heads = static_cast<int>(c.num_kv_heads);
  const int d = static_cast<int>(c.head_dim);
  const int layers = static_cast<int>(c.num_layers);
  std::optional<SparsePrefillConfig> config;
  if (!a.sparse_prefill_config.empty()) {
    config = load_sparse_prefill_config(a.sparse_prefill_config);
    check_config_fits(*config, layers, heads, a.sparse_prefill_config);
  }
  std::printf("\n%s sparse prefill attention, one layer (%d/%d heads, head_dim %d), block %d\n\n",
              a.shape.c_str(), heads, kv_heads, d, a.prefill_block);
  // The floor of a row: its computed FLOPs at the rate a large bf16 GEMM reaches on this GPU.
  const double gemm_rate = measure_gemm_rate(device);
  auto floor_ms = [&](double flops) { return flops / gemm_rate * 1e3; };
  std::printf(
      "(dense: the faster of the sparse kernel's dense plan and the forward's batched dense\n"
      "attention, dense_batched — the Hopper wgmma kernel at head_dim 128; floor: the computed\n"
      "FLOPs at the %.0f TFLOP/s of a bf16 8192^3 cuBLAS GEMM here)\n\n",
      gemm_rate / 1e12);
  std::printf(
      "| tokens | pattern | computed density | ms | TFLOP/s (computed) | floor ms | x floor | "
      "speed-up vs dense |\n"
      "|---|---|---|---|---|---|---|---|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (int32_t n : lengths) {
    if (n < 1) fail("--prefill-lengths values must be positive (got ", n, ")");
    const PrefillLayout layout = video_layout(n, a.prefill_block);
    std::mt19937 rng(17);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(static_cast<size_t>(n) * d), k(q.size());
    for (auto& x : q) x = nd(rng);
    for (auto& x : k) x = nd(rng);
    const HeadQK qk{q.data(), k.data(), d, d, d};
    double dense_ms = 0;
    const double causal_pairs = 0.5 * double(n) * (n + 1);
    {  // the forward's own dense attention on the same prefill
      const int reps = n > 65536 ? 1 : std::min(a.reps, 3);
      const double ms = time_cuda_dense_prefill(n, a.prefill_block, heads, kv_heads, d, reps) / 1e3;
      const double flops = 4.0 * d * heads * causal_pairs;
      const double tflops = flops / (ms * 1e-3) / 1e12;
      std::printf("| %d | dense_batched | 1.000 | %.2f | %.0f | %.2f | %.2fx | - |\n", n, ms,
                  tflops, floor_ms(flops), ms / floor_ms(flops));
      rows.push_back({{"tokens", n},
                      {"pattern", "dense_batched"},
                      {"layers", 1},
                      {"computed_density", 1.0},
                      {"ms", ms},
                      {"tflops", tflops},
                      {"floor_ms", floor_ms(flops)}});
      dense_ms = ms;
    }
    for (const NamedPattern& np : patterns) {
      SparsePrefillPlan plan;
      plan.n_tokens = n;
      plan.block_size = a.prefill_block;
      plan.heads.assign(static_cast<size_t>(heads), build_head_plan(np.pattern, layout, qk));
      const double density = computed_density(plan);
      // A dense-like plan at 128K+ takes seconds a call (256K: ~11 s at 200 TFLOP/s).
      const int reps = density <= 0.5 ? a.reps : n > 65536 ? 1 : std::min(a.reps, 3);
      const double ms = time_cuda_sparse_prefill(plan, heads, kv_heads, d, reps) / 1e3;
      if (np.name == "dense") dense_ms = std::min(dense_ms, ms);  // the baseline: the faster
      const double flops = 4.0 * d * heads * causal_pairs * density;
      const double tflops = flops / (ms * 1e-3) / 1e12;
      std::printf("| %d | %s | %.3f | %.2f | %.0f | %.2f | %.2fx | %.2fx |\n", n, np.name.c_str(),
                  density, ms, tflops, floor_ms(flops), ms / floor_ms(flops), dense_ms / ms);
      std::fflush(stdout);
      rows.push_back({{"tokens", n},
                      {"pattern", np.name},
                      {"layers", 1},
                      {"computed_density", density},
                      {"ms", ms},
                      {"tflops", tflops},
                      {"floor_ms", floor_ms(flops)},
                      {"speedup_vs_dense", dense_ms / ms}});
    }
    if (config) {
      double density = 0;
      const double ms = time_config_layers(*config, layers, heads, kv_heads, d, layout, qk,
                                           std::min(a.reps, 3), density);
      const double flops = 4.0 * d * heads * causal_pairs * density * layers;
      std::printf(
          "| %d | config, %d layers (vs dense x %d) | %.3f | %.2f | - | %.2f | %.2fx | %.2fx |\n",
          n, layers, layers, density, ms, floor_ms(flops), ms / floor_ms(flops),
          dense_ms * layers / ms);
      std::fflush(stdout);
      rows.push_back({{"tokens", n},
                      {"pattern", "config"},
                      {"layers", layers},
                      {"computed_density", density},
                      {"ms", ms},
                      {"floor_ms", floor_ms(flops)},
                      {"speedup_vs_dense", dense_ms * layers / ms}});
    }
  }
  return rows;
}

}  // namespace dllm::cli
