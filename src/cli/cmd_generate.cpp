// dllm generate: prompt in, text out, with any decoding strategy the checkpoint's family supports.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/text_generation.h"

namespace dllm::cli {

namespace {

// The embedded default model (models/tiny-block, trained by tools/train/train.py) when -m is not
// given: $DLLM_DEFAULT_MODEL, next to the executable (an install or a build tree), or the source
// tree this binary was built from.
std::string default_model_dir() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("DLLM_DEFAULT_MODEL")) candidates.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "models" / "tiny-block");
    candidates.push_back(exe.parent_path().parent_path() / "models" / "tiny-block");
    candidates.push_back(exe.parent_path().parent_path() / "share" / "dllm" / "models" /
                         "tiny-block");
  }
  candidates.push_back(fs::path(DLLM_SOURCE_DIR) / "models" / "tiny-block");
  for (const auto& c : candidates)
    if (fs::is_regular_file(c / "config.json", ec)) return c.string();
  std::string tried;
  for (const auto& c : candidates) tried += "\n  " + c.string();
  fail(
      "no -m MODEL_DIR given and the embedded default model models/tiny-block was not found; "
      "tried:",
      tried);
}

struct GenerateArgs {
  std::string model_dir, prompt, system, prompt_ids, format = "text", confidence = "tempered",
                                                     enable_thinking;
  bool chat = false;
  std::string device = "auto";
  DecodeParams params;
  std::vector<CLI::Option*> s2d2_options;
  std::vector<std::string> stops;
  std::string entropy_threshold, pad_window;
  bool trace = false;
};

std::string join_ids(std::span<const int32_t> ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// "--entropy-threshold": a number of nats, or "none" (one token per step).
float parse_entropy_threshold(const std::string& text) {
  if (text == "none") return -std::numeric_limits<float>::infinity();
  size_t used = 0;
  float v = 0;
  try {
    v = std::stof(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    fail("--entropy-threshold must be a number >= 0 or 'none' (got '", text, "')");
  return v;
}

// Accepted draft tokens per verification forward; rejections per verified token.
double accepted_per_verify(const SpeculationStats& v) {
  return v.verify_calls ? double(v.accepted) / double(v.verify_calls) : 0.0;
}
double rejection_rate(const SpeculationStats& v) {
  const int64_t n = v.accepted + v.rejected;
  return n ? double(v.rejected) / double(n) : 0.0;
}

// --strategy s2d2 knobs (method-specs §5); refused with other strategies.
void add_s2d2_options(CLI::App& cmd, GenerateArgs& a) {
  S2d2Params& s = a.params.s2d2;
  const char* g = "S2D2 (--strategy s2d2)";
  auto opt = [&](CLI::Option* o) {
    o->group(g);
    a.s2d2_options.push_back(o);
  };
  opt(cmd.add_option("--verify-policy", s.policy,
                     "span | score | hysteresis | bandit (default span: always verify)"));
  opt(cmd.add_option("--verify-span-min", s.span_min, "span: verify iff |C| >= N (default 1)"));
  opt(cmd.add_option("--verify-score-type", s.score_type,
                     "static (K - c) | dynamic (K - c * N_hi, default)"));
  opt(cmd.add_option("--verify-cost", s.score_cost, "score cost c (default 2)"));
  opt(cmd.add_option("--verify-threshold", s.score_threshold,
                     "score: verify iff score >= this (default 0)"));
  opt(cmd.add_option("--hysteresis-on", s.hysteresis_on, "hysteresis: turn on above (default 0)"));
  opt(cmd.add_option("--hysteresis-off", s.hysteresis_off,
                     "hysteresis: turn off below (default -1)"));
  opt(cmd.add_option("--acceptance-estimator", s.estimator,
                     "soft-entropy | hard-margin (default) | hard-entropy | confidence-power | "
                     "clipped-linear-margin | renyi-2"));
  opt(cmd.add_option("--entropy-beta", s.entropy_beta, "soft-entropy beta (default 1)"));
  opt(cmd.add_option("--margin-threshold", s.margin_threshold, "hard-margin (default 0.05)"));
  opt(cmd.add_option("--hard-entropy-threshold", s.entropy_threshold,
                     "hard-entropy estimator threshold (default 0.1)"));
  opt(cmd.add_option("--confidence-power", s.confidence_power, "confidence-power (default 0.8)"));
  opt(cmd.add_option("--margin-coef", s.margin_coef, "clipped-linear-margin (default 1)"));
  opt(cmd.add_option("--accept-gamma", s.gamma, "acceptance tempering (q/p)^gamma (default 1)"));
  opt(cmd.add_option("--ucb-beta", s.ucb_beta, "bandit exploration (default 1)"));
  opt(cmd.add_option("--ucb-span-bins", s.ucb_span_bins, "bandit span-length bins (default 2)"));
  opt(cmd.add_option("--ucb-progress-bins", s.ucb_progress_bins, "bandit progress bins (2)"));
  opt(cmd.add_option("--ucb-entropy-bins", s.ucb_entropy_bins, "bandit entropy bins (2)"));
  opt(cmd.add_flag("--cache-ver", s.cache_ver, "SDAR: causal prefill / commit forwards"));
  opt(cmd.add_flag("--draft-ver", s.draft_ver, "SDAR: decoded in-block prefix causal in drafts"));
}

void run_generate(GenerateArgs a) {
  if (a.params.strategy != "s2d2")
    for (const CLI::Option* o : a.s2d2_options)
      if (o->count() > 0) fail(o->get_name(), " applies to --strategy s2d2 only");
  if (!a.entropy_threshold.empty())
    a.params.entropy_threshold = parse_entropy_threshold(a.entropy_threshold);
  if (!a.pad_window.empty()) {
    if (a.pad_window != "true" && a.pad_window != "false")
      fail("--pad-window must be true or false (got '", a.pad_window, "')");
    a.params.pad_window = a.pad_window == "true";
  }
  if (a.confidence == "tempered") {
    a.params.confidence = ConfidenceKind::kTempered;
  } else if (a.confidence == "filtered") {
    a.params.confidence = ConfidenceKind::kFiltered;
  } else {
    fail("--confidence '", a.confidence, "' (expected tempered or filtered)");
  }
  if (a.format != "text" && a.format != "json")
    fail("--format '", a.format, "' (expected text or json)");
  TextRequest req;
  req.params = a.params;
  req.stop = a.stops;
  if (!a.prompt_ids.empty()) {
    if (!a.prompt.empty() || a.chat) fail("--prompt-ids cannot be combined with -p or --chat");
    req.prompt_ids = parse_int_list(a.prompt_ids, "--prompt-ids");
  } else if (a.chat) {
    if (a.prompt.empty()) fail("--chat needs the user message in -p");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    messages.push_back({{"role", "user"}, {"content", a.prompt}});
    req.messages = messages;
  } else {
    if (!a.system.empty()) fail("--system needs --chat");
    if (a.prompt.empty())
      fail("give a prompt: -p TEXT (raw), -p TEXT --chat, or --prompt-ids 1,2,3");
    req.prompt = a.prompt;
  }
  if (!a.enable_thinking.empty()) {
    if (a.enable_thinking != "true" && a.enable_thinking != "false")
      fail("--enable-thinking must be true or false (got '", a.enable_thinking, "')");
    req.template_vars["enable_thinking"] = a.enable_thinking == "true";
  }

  if (a.model_dir.empty()) a.model_dir = default_model_dir();
  auto model = Model::load(a.model_dir);
  auto backend = make_backend(*model, a.device);
  // WeDLM's padded windows (one fixed shape) exist for CUDA graph capture; on the CPU they would
  // only double each step's rows, so there the default is the unpadded window.
  if (a.pad_window.empty()) a.params.pad_window = backend->name().rfind("cuda", 0) == 0;
  TextGenerator gen(*model, *backend);
  const bool text = a.format == "text";
  const bool have_text = gen.tokenizer().has_value();
  TextCallback on_text;
  if (text && have_text)
    on_text = [](std::string_view t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
    };
  TraceCallback trace;
  if (a.trace)
    trace = [&](const Decoder& d) {
      std::fprintf(stderr, "[trace %lld] %s\n", static_cast<long long>(d.forwards()),
                   join_ids(d.canvas()).c_str());
    };
  const TextResult r = gen.generate(req, on_text, trace);
  const double tpf =
      r.stats.forwards ? double(r.stats.generated_tokens) / double(r.stats.forwards) : 0.0;
  const double tps = r.stats.seconds > 0 ? double(r.stats.generated_tokens) / r.stats.seconds : 0.0;
  if (text) {
    // Without a tokenizer there is no text to stream: print the ids.
    if (!have_text) std::printf("%s", join_ids(r.ids).c_str());
    std::printf("\n");
    std::string extra;
    for (const auto& m : r.stats.decoder_metrics) {
      char buf[64];
      if (m.is_count)
        std::snprintf(buf, sizeof buf, ", %s %lld", m.name.c_str(),
                      static_cast<long long>(m.value));
      else
        std::snprintf(buf, sizeof buf, ", %s %.3f", m.name.c_str(), m.value);
      extra += buf;
    }
    std::fprintf(stderr,
                 "[%s] prompt %lld tokens, generated %lld tokens, %lld forwards (%.2f "
                 "tokens/forward)%s, %.3f s, %.1f tokens/s, finish: %s\n",
                 r.params.strategy.c_str(), static_cast<long long>(r.stats.prompt_tokens),
                 static_cast<long long>(r.stats.generated_tokens),
                 static_cast<long long>(r.stats.forwards), tpf, extra.c_str(), r.stats.seconds, tps,
                 r.finish_reason.c_str());
    if (r.stats.speculative) {
      const auto& v = r.stats.speculation;
      std::fprintf(stderr,
                   "[s2d2] %lld verify calls, %.2f accepted per verify, rejection rate %.3f, "
                   "%lld forwards (%lld draft + %lld verify), %.2f tokens/forward\n",
                   static_cast<long long>(v.verify_calls), accepted_per_verify(v),
                   rejection_rate(v), static_cast<long long>(r.stats.forwards),
                   static_cast<long long>(r.stats.forwards - v.verify_calls),
                   static_cast<long long>(v.verify_calls), tpf);
    }
  } else {
    nlohmann::ordered_json j = {{"ids", r.ids},
                                {"text", r.text},
                                {"finish_reason", r.finish_reason},
                                {"strategy", r.params.strategy},
                                {"stats",
                                 {{"forwards", r.stats.forwards},
                                  {"prompt_tokens", r.stats.prompt_tokens},
                                  {"generated_tokens", r.stats.generated_tokens},
                                  {"tokens_per_forward", tpf},
                                  {"query_rows", r.stats.query_rows},
                                  {"seconds", r.stats.seconds},
                                  {"tokens_per_second", tps}}}};
    for (const auto& m : r.stats.decoder_metrics) {
      if (m.is_count)
        j["stats"][m.name] = static_cast<long long>(m.value);
      else
        j["stats"][m.name] = m.value;
    }
    if (r.stats.speculative) {
      const auto& v = r.stats.speculation;
      j["stats"]["s2d2"] = {{"verify_calls", v.verify_calls},
                            {"accepted", v.accepted},
                            {"rejected", v.rejected},
                            {"accepted_per_verify", accepted_per_verify(v)},
                            {"rejection_rate", rejection_rate(v)},
                            {"draft_forwards", r.stats.forwards - v.verify_calls},
                            {"verify_forwards", v.verify_calls}};
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("generate", "Generate text with a diffusion (or autoregressive) decoder");
  auto a = std::make_shared<GenerateArgs>();
  a->params.sampler.top_p = -1.0f;  // unset: family default
  cmd->add_option("-m,--model", a->model_dir,
                  "Checkpoint directory (default: the embedded models/tiny-block)");
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text (raw), or the user message with --chat");
  cmd->add_flag("--chat", a->chat, "Apply the checkpoint's chat template to -p (a user turn)");
  cmd->add_option("--system", a->system, "System message (with --chat)");
  cmd->add_option("--enable-thinking", a->enable_thinking,
                  "true | false: the chat template's enable_thinking variable");
  cmd->add_option("--prompt-ids", a->prompt_ids,
                  "Prompt as comma-separated token ids (bypasses the tokenizer)");
  cmd->add_option("--strategy", a->params.strategy,
                  "block | ar | s2d2 (SDAR, Fast-dLLM v2) | full | d2cache | fastdllm | dllmcache "
                  "(LLaDA, Dream) | wedlm | ar (WeDLM) (default: the family's)");
  cmd->add_option("--max-tokens", a->params.max_tokens,
                  "Maximum generated tokens; full diffusion: the canvas length (default 128 for "
                  "LLaDA, 256 otherwise)");
  cmd->add_option("--block-length", a->params.block_length,
                  "Block length (default: the checkpoint's; LLaDA 32)");
  cmd->add_option("--sub-block-length", a->params.sub_block_length,
                  "Fast-dLLM v2 sub-block length (default 8)");
  cmd->add_option("--steps", a->params.steps,
                  "Denoising steps: per block for --strategy block (default: block length), in "
                  "all for full diffusion (default: --max-tokens)");
  cmd->add_option("--threshold", a->params.threshold,
                  "Confidence threshold in [0, 1] (default 0.9)");
  cmd->add_option("--remasking", a->params.remasking,
                  "block: low_confidence_dynamic (default) | low_confidence_static | sequential; "
                  "LLaDA: low_confidence (default) | random");
  cmd->add_option("--cfg-scale", a->params.cfg_scale,
                  "LLaDA classifier-free guidance scale (default 0 = off)");
  cmd->add_flag("--logits-eos-inf", a->params.logits_eos_inf, "LLaDA: never generate EOS");
  cmd->add_flag("--confidence-eos-eot-inf", a->params.confidence_eos_eot_inf,
                "LLaDA: EoT (and, greedy, EOS) get confidence 0, as generate.py does");
  cmd->add_option("--alg", a->params.alg,
                  "Dream: origin | maskgit_plus | topk_margin | entropy (default)");
  cmd->add_option("--alg-temp", a->params.alg_temp,
                  "Dream: > 0 draws positions from softmax(confidence / alg_temp) (default 0)");
  cmd->add_option("--cache", a->params.cache,
                  "fastdllm (Fast-dLLM v1): dual (default) | prefix KV cache");
  cmd->add_option("--dlc-kp", a->params.dlc_kp,
                  "dllmcache: prompt refresh interval K_p (default LLaDA 50, Dream 25)");
  cmd->add_option("--dlc-kr", a->params.dlc_kr,
                  "dllmcache: response refresh interval K_r (default LLaDA 7, Dream 2)");
  cmd->add_option("--dlc-rho", a->params.dlc_rho,
                  "dllmcache: fraction of response rows refreshed by value similarity (0.25)");
  cmd->add_option("--d2c-k", a->params.d2c_k,
                  "d2cache: masked tokens recomputed per step (default 32)");
  cmd->add_option("--d2c-sigma", a->params.d2c_sigma,
                  "d2cache: certainty-density std (default 10; 0 = certainty prior off)");
  cmd->add_option("--d2c-p", a->params.d2c_p, "d2cache: attention-rollout nucleus (default 0.1)");
  cmd->add_option("--d2c-inflate", a->params.d2c_inflate,
                  "d2cache: also recompute gaps of at most this span between selected tokens "
                  "(default 0)");
  cmd->add_flag("--d2c-frozen-conf", a->params.d2c_frozen_conf,
                "d2cache: keep step 0's confidences for the selection, as the reference code "
                "does (default: current confidences, as the paper)");
  cmd->add_flag("--d2c-select-all", a->params.d2c_select_all,
                "d2cache: recompute every row every step (verification)");
  cmd->add_option(
      "--confidence", a->confidence,
      "tempered: p under softmax(logits/T) before top-k/top-p (SDAR evaluation, default) | "
      "filtered: p after filtering (SDAR generate.py)");
  cmd->add_option_function<int32_t>(
      "--window", [a](const int32_t& w) { a->params.window = w; },
      "WeDLM window: slots after the committed prefix (default 16)");
  cmd->add_option("--entropy-threshold", a->entropy_threshold,
                  "WeDLM: fill every mask whose entropy (nats) + pos-penalty * distance is below "
                  "this (default 0.4); none = one token per step");
  cmd->add_option_function<float>(
      "--pos-penalty", [a](const float& v) { a->params.pos_penalty = v; },
      "WeDLM: entropy penalty per window slot from the first mask (default 0.02)");
  cmd->add_option("--pad-window", a->pad_window,
                  "WeDLM: pad each step's forward to 2*window queries, one fixed shape "
                  "true (default on CUDA, for graph capture) | false (default on the CPU)");
  cmd->add_option("--temperature", a->params.sampler.temperature, "0 = greedy (default)");
  cmd->add_option("--top-k", a->params.sampler.top_k, "0 = off");
  cmd->add_option("--top-p", a->params.sampler.top_p, "1 = off");
  cmd->add_option("--seed", a->params.seed, "Sampling seed (default 0)");
  cmd->add_option("--device", a->device, "auto (CUDA when available) | cpu | cuda");
  cmd->add_option("--stop", a->stops, "Stop string (repeatable); excluded from the output");
  cmd->add_option("--format", a->format, "text (stream) | json");
  cmd->add_flag("--trace", a->trace, "Print the decoder's canvas after every forward to stderr");
  add_s2d2_options(*cmd, *a);
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace dllm::cli
