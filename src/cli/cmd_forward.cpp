// dllm forward: one raw model forward, logits dumped as .npy — the debugging and parity tool.
//   dllm forward -m DIR --ids 5,17,42 [--positions 0,1,2] [--attention
//   causal|bidirectional|block:N]
//                [--prefix N] --dump-logits OUT.npy
// --prefix N runs the first N tokens as a cached prefill (append) and the rest as queries against
// the cache under the same rule; only the query rows are dumped.
#include <cstdio>
#include <numeric>

#include "backend/backend.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/npy.h"

namespace dllm::cli {

namespace {

struct ForwardArgs {
  std::string model_dir, ids, positions, attention, dump, device = "cpu";
  int64_t prefix = 0;
};

void run_forward(const ForwardArgs& a) {
  auto model = Model::load(a.model_dir);
  const ModelConfig& c = model->config();
  const std::vector<int32_t> ids = parse_int_list(a.ids, "--ids");
  std::vector<int32_t> pos;
  if (a.positions.empty()) {
    pos.resize(ids.size());
    std::iota(pos.begin(), pos.end(), 0);
  } else {
    pos = parse_int_list(a.positions, "--positions");
  }
  if (pos.size() != ids.size())
    fail("--positions has ", pos.size(), " entries but --ids has ", ids.size(),
         " (they must match)");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      fail("--ids: token id ", ids[i], " (index ", i, ") is outside the vocabulary of size ",
           c.vocab_size);

  AttentionRule rule;
  if (!a.attention.empty()) {
    rule = AttentionRule::parse(a.attention);
  } else {
    rule = AttentionRule{c.attention, c.block_size, {}};
  }
  if (a.prefix < 0 || a.prefix >= static_cast<int64_t>(ids.size()))
    fail("--prefix ", a.prefix, " must leave at least one query token (0 <= N < ", ids.size(), ")");

  auto backend = make_backend(*model, a.device);
  auto cache = backend->create_cache(static_cast<int64_t>(ids.size()));
  const size_t p = static_cast<size_t>(a.prefix);
  if (p > 0) {
    SequenceForward pre;
    pre.cache = cache.get();
    pre.tokens.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(p));
    pre.positions.assign(pos.begin(), pos.begin() + static_cast<std::ptrdiff_t>(p));
    pre.rule = rule;
    pre.write = CacheWrite::kAppend;
    backend->forward(std::span(&pre, 1));
  }
  SequenceForward f;
  f.cache = cache.get();
  f.tokens.assign(ids.begin() + static_cast<std::ptrdiff_t>(p), ids.end());
  f.positions.assign(pos.begin() + static_cast<std::ptrdiff_t>(p), pos.end());
  f.rule = rule;
  f.write = CacheWrite::kNone;
  f.want_logits = true;
  f.output_rows.resize(f.tokens.size());
  std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
  auto results = backend->forward(std::span(&f, 1));
  const int64_t rows = static_cast<int64_t>(f.tokens.size());
  write_npy_f32(a.dump, results[0].logits, {rows, c.vocab_size});
  std::fprintf(stderr, "dllm forward: %lld rows x %lld logits (%s attention) -> %s\n",
               static_cast<long long>(rows), static_cast<long long>(c.vocab_size),
               rule.to_string().c_str(), a.dump.c_str());
}

}  // namespace

void add_forward_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("forward", "Run one forward pass and dump float32 logits as .npy");
  auto a = std::make_shared<ForwardArgs>();
  cmd->add_option("-m,--model", a->model_dir, "Checkpoint directory")->required();
  cmd->add_option("--ids", a->ids, "Comma-separated token ids")->required();
  cmd->add_option("--positions", a->positions,
                  "Comma-separated logical positions (default 0..n-1)");
  cmd->add_option("--attention", a->attention,
                  "causal | bidirectional | block:N (default: the family's rule)");
  cmd->add_option("--prefix", a->prefix,
                  "Run the first N tokens as a cached prefill, dump the rest");
  cmd->add_option("--device", a->device, "cpu (default, the fp32 reference) | cuda | auto");
  cmd->add_option("--dump-logits", a->dump, "Output .npy file, float32 [n_tokens, vocab]")
      ->required();
  cmd->callback([a] { run_forward(*a); });
}

}  // namespace dllm::cli
