// dllm search-patterns: MMInference's offline pattern search (attention/sparse_prefill_search.h)
// on one calibration prompt: one CPU forward keeps every layer's queries and keys, the search
// picks a pattern per (layer, query head), the MMInference-form config is written.
//   dllm search-patterns -m DIR --ids-file PROMPT.npy [--attention block:4] [--vision B,E]
//                        [--frame-stride 196] [--max-density 0.1] [--sample-rows 1024]
//                        -o CONFIG.json
#include <cstdio>
#include <numeric>

#include "attention/sparse_prefill_config.h"
#include "attention/sparse_prefill_search.h"
#include "backend/backend.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/npy.h"

namespace dllm::cli {

namespace {

struct SearchArgs {
  std::string model_dir, ids, ids_file, attention, vision, out;
  int frame_stride = 0, sample_rows = 1024;
  double max_density = 1.0;
};

std::vector<int32_t> prompt_ids(const SearchArgs& a, const ModelConfig& c) {
  if (a.ids.empty() == a.ids_file.empty()) fail("give the prompt as --ids or as --ids-file (one)");
  std::vector<int32_t> ids;
  if (!a.ids.empty()) {
    ids = parse_int_list(a.ids, "--ids");
  } else {
    const NpyArray arr = read_npy(a.ids_file);
    if (arr.is_float) fail(a.ids_file, ": token ids must be an int32 / int64 array");
    ids = arr.i32;
  }
  if (ids.empty()) fail("the calibration prompt is empty");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      fail("token id ", ids[i], " (index ", i, ") is outside the vocabulary of size ",
           c.vocab_size);
  return ids;
}

void run_search(const SearchArgs& a) {
  auto model = Model::load(a.model_dir);
  const ModelConfig& c = model->config();
  const std::vector<int32_t> ids = prompt_ids(a, c);
  const int32_t n = static_cast<int32_t>(ids.size());
  const AttentionRule rule = a.attention.empty() ? AttentionRule{c.attention, c.block_size, {}}
                                                 : AttentionRule::parse(a.attention);
  if (rule.kind != AttentionKind::kCausal && rule.kind != AttentionKind::kBlockCausal)
    fail("--attention must be causal or block:N (sparse prefill is for causal prefills; got ",
         rule.to_string(), ")");
  PrefillLayout layout;
  layout.n_tokens = n;
  layout.block_size =
      rule.kind == AttentionKind::kBlockCausal ? static_cast<int32_t>(rule.block_size) : 1;
  layout.frame_stride = a.frame_stride;
  if (!a.vision.empty()) {
    const auto span = parse_int_list(a.vision, "--vision");
    if (span.size() != 2 || span[0] < 0 || span[1] <= span[0] || span[1] > n)
      fail("--vision must be BEGIN,END with 0 <= BEGIN < END <= ", n, " (got ", a.vision, ")");
    layout.vision_begin = span[0];
    layout.vision_end = span[1];
  }
  if (a.frame_stride < 0) fail("--frame-stride must be >= 0 (got ", a.frame_stride, ")");
  SearchOptions options;
  options.max_density = a.max_density;
  options.sample_rows = a.sample_rows;

  auto backend = make_backend(*model, "cpu");
  SequenceForward f;
  f.tokens = ids;
  f.positions.resize(ids.size());
  std::iota(f.positions.begin(), f.positions.end(), 0);
  f.rule = rule;
  f.want_layer_qk = true;
  const SequenceResult r = backend->forward(std::span(&f, 1))[0];

  const int heads = static_cast<int>(c.num_heads), kv_heads = static_cast<int>(c.num_kv_heads);
  const int hd = static_cast<int>(c.head_dim);
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  const auto space = published_search_space(a.frame_stride);
  SparsePrefillConfig config;
  config.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    auto& layer = config.layers[static_cast<size_t>(l)];
    layer.given = true;
    for (int h = 0; h < heads; ++h) {
      const HeadQK qk{&r.layer_q[static_cast<size_t>(l * n * qd + h * hd)],
                      &r.layer_k[static_cast<size_t>(l * n * kvd + (h / (heads / kv_heads)) * hd)],
                      qd, kvd, hd};
      const HeadSearchResult best = search_head_pattern(qk, layout, space, options);
      std::fprintf(stderr, "layer %lld head %d: %s (recall %.3f, density %.3f)\n",
                   static_cast<long long>(l), h, best.label.c_str(), best.recall, best.density);
      layer.heads.push_back(best.best);
      layer.head_given.push_back(true);
    }
  }
  save_sparse_prefill_config(config, a.out);
  std::fprintf(stderr, "dllm search-patterns: %lld layers x %d heads over %d tokens -> %s\n",
               static_cast<long long>(c.num_layers), heads, n, a.out.c_str());
}

}  // namespace

void add_search_patterns_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "search-patterns",
      "MMInference offline pattern search on one calibration prompt: writes a --sparse-prefill "
      "config");
  auto a = std::make_shared<SearchArgs>();
  cmd->add_option("-m,--model", a->model_dir, "Checkpoint directory")->required();
  cmd->add_option("--ids", a->ids, "Comma-separated prompt token ids");
  cmd->add_option("--ids-file", a->ids_file, "Prompt token ids, an int32 / int64 .npy");
  cmd->add_option("--attention", a->attention, "causal | block:N (default: the family's rule)");
  cmd->add_option("--vision", a->vision, "BEGIN,END: the vision span (grid heads; rows scored)");
  cmd->add_option("--frame-stride", a->frame_stride, "Tokens per video frame (0: none)");
  cmd->add_option("--max-density", a->max_density,
                  "Skip candidates attending more than this share of the causal keys (1)");
  cmd->add_option("--sample-rows", a->sample_rows, "Rows scored per head, evenly spaced (1024)");
  cmd->add_option("-o,--output", a->out, "The config to write (MMInference JSON)")->required();
  cmd->callback([a] { run_search(*a); });
}

}  // namespace dllm::cli
