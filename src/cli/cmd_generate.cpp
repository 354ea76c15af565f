// dllm generate: prompt in, text out, with any decoding strategy the checkpoint's family supports.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine.h"

namespace dllm::cli {

namespace {

struct GenerateArgs {
  std::string model_dir, prompt_ids, format = "text", confidence = "tempered";
  DecodeParams params;
  std::vector<std::string> stops;
  bool trace = false;
};

std::string join_ids(std::span<const int32_t> ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

void run_generate(GenerateArgs a) {
  auto model = Model::load(a.model_dir);
  const ModelConfig& c = model->config();
  if (a.prompt_ids.empty()) fail("give a prompt: --prompt-ids 1,2,3");
  const std::vector<int32_t> prompt = parse_int_list(a.prompt_ids, "--prompt-ids");
  if (a.confidence == "tempered") {
    a.params.confidence = ConfidenceKind::kTempered;
  } else if (a.confidence == "filtered") {
    a.params.confidence = ConfidenceKind::kFiltered;
  } else {
    fail("--confidence '", a.confidence, "' (expected tempered or filtered)");
  }
  if (a.format != "text" && a.format != "json")
    fail("--format '", a.format, "' (expected text or json)");
  GenerationRequest req;
  req.prompt = prompt;
  req.params = resolve_decode_params(c, a.params, static_cast<int64_t>(prompt.size()));
  req.stop_ids = c.stop_token_ids;

  auto backend = make_cpu_backend(*model);
  Engine engine(*model, *backend);
  const bool text = a.format == "text";
  TokenCallback on_tokens;
  if (text)
    on_tokens = [](std::span<const int32_t> ids) {
      std::printf("%s ", join_ids(ids).c_str());
      std::fflush(stdout);
    };
  TraceCallback trace;
  if (a.trace)
    trace = [&](const Decoder& d) {
      std::fprintf(stderr, "[trace %lld] %s\n", static_cast<long long>(d.forwards()),
                   join_ids(d.canvas()).c_str());
    };
  const GenerationResult r = engine.generate(req, on_tokens, trace);
  const double tpf =
      r.stats.forwards ? double(r.stats.generated_tokens) / double(r.stats.forwards) : 0.0;
  const double tps = r.stats.seconds > 0 ? double(r.stats.generated_tokens) / r.stats.seconds : 0.0;
  if (text) {
    std::printf("\n");
    std::fprintf(stderr,
                 "[%s] prompt %lld tokens, generated %lld tokens, %lld forwards (%.2f "
                 "tokens/forward), %.3f s, "
                 "%.1f tokens/s, finish: %s\n",
                 req.params.strategy.c_str(), static_cast<long long>(r.stats.prompt_tokens),
                 static_cast<long long>(r.stats.generated_tokens),
                 static_cast<long long>(r.stats.forwards), tpf, r.stats.seconds, tps,
                 r.finish_reason.c_str());
  } else {
    nlohmann::json j = {{"ids", r.ids},
                        {"text", ""},
                        {"finish_reason", r.finish_reason},
                        {"stats",
                         {{"forwards", r.stats.forwards},
                          {"prompt_tokens", r.stats.prompt_tokens},
                          {"generated_tokens", r.stats.generated_tokens},
                          {"tokens_per_forward", tpf},
                          {"seconds", r.stats.seconds},
                          {"tokens_per_second", tps}}}};
    std::printf("%s\n", j.dump().c_str());
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("generate", "Generate text with a diffusion (or autoregressive) decoder");
  auto a = std::make_shared<GenerateArgs>();
  a->params.sampler.top_p = -1.0f;  // unset: family default
  cmd->add_option("-m,--model", a->model_dir, "Checkpoint directory")->required();
  cmd->add_option("--prompt-ids", a->prompt_ids,
                  "Prompt as comma-separated token ids (bypasses the tokenizer)");
  cmd->add_option("--strategy", a->params.strategy, "block | ar (default: the family's)");
  cmd->add_option("--max-tokens", a->params.max_tokens, "Maximum generated tokens (default 256)");
  cmd->add_option("--block-length", a->params.block_length,
                  "Block length (default: the checkpoint's)");
  cmd->add_option("--sub-block-length", a->params.sub_block_length,
                  "Fast-dLLM v2 sub-block length (default 8)");
  cmd->add_option("--steps", a->params.steps, "Denoising steps per block (default: block length)");
  cmd->add_option("--threshold", a->params.threshold,
                  "Confidence threshold in [0, 1] (default 0.9)");
  cmd->add_option("--remasking", a->params.remasking,
                  "low_confidence_dynamic (default) | low_confidence_static | sequential");
  cmd->add_option(
      "--confidence", a->confidence,
      "tempered: p under softmax(logits/T) before top-k/top-p (SDAR evaluation, default) | "
      "filtered: p after filtering (SDAR generate.py)");
  cmd->add_option("--temperature", a->params.sampler.temperature, "0 = greedy (default)");
  cmd->add_option("--top-k", a->params.sampler.top_k, "0 = off");
  cmd->add_option("--top-p", a->params.sampler.top_p, "1 = off");
  cmd->add_option("--seed", a->params.seed, "Sampling seed (default 0)");
  cmd->add_option("--format", a->format, "text (stream) | json");
  cmd->add_flag("--trace", a->trace, "Print the decoder's canvas after every forward to stderr");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace dllm::cli
