// dllm generate: prompt in, text out, with any decoding strategy the checkpoint's family supports
// — one prompt from the command line, or a file of requests run through one engine at once
// (--requests FILE.jsonl, vLLM's offline LLM.generate(prompts)). Only the public API
// (include/dllm/engine.h) is used.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/request_json.h"
#include "core/error.h"
#include "decode/decode_options.h"
#include "dllm/engine.h"

namespace dllm::cli {

namespace {

// A whole number in 64 bits: 0..2^64-1, or a negative one down to -2^63 taken in two's
// complement, as the server reads a JSON seed; anything else is refused, never wrapped.
uint64_t parse_seed(const std::string& v) {
  const char* end = v.data() + v.size();
  if (!v.empty() && v[0] == '-') {
    int64_t x = 0;
    const auto [p, ec] = std::from_chars(v.data(), end, x);
    if (ec == std::errc() && p == end) return static_cast<uint64_t>(x);
  } else {
    uint64_t x = 0;
    const auto [p, ec] = std::from_chars(v.data(), end, x);
    if (ec == std::errc() && p == end && !v.empty()) return x;
  }
  fail("--seed must be a whole number in [-9223372036854775808, 18446744073709551615] (got '", v,
       "')");
}

struct GenerateArgs {
  EngineConfig engine;
  std::string prompt, system, prompt_ids, format = "text", enable_thinking;
  bool chat = false, trace = false;
  std::vector<std::string> stops;
  float temperature = 0.0f, top_p = 1.0f;
  int32_t top_k = 0;
  std::string seed = "0";
  std::vector<CLI::Option*> sampling;  // temperature, top-k, top-p: set only when given
  std::map<std::string, std::string> knob_values;
  std::map<std::string, CLI::Option*> knobs;
  std::string requests;  // --requests FILE.jsonl
  int concurrency = 0;
  std::vector<std::string> images, videos;  // vision-language models
  int32_t frames = 32;
};

std::string join_ids(std::span<const int32_t> ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

void print_stats_line(const RequestResult& r) {
  const RequestStats& s = r.stats;
  const double tpf = s.forwards ? double(s.generated_tokens) / double(s.forwards) : 0.0;
  const double tps = s.seconds > 0 ? double(s.generated_tokens) / s.seconds : 0.0;
  std::string extra;
  for (const Metric& m : s.metrics) {
    char buf[64];
    if (m.is_count)
      std::snprintf(buf, sizeof buf, ", %s %lld", m.name.c_str(), static_cast<long long>(m.value));
    else
      std::snprintf(buf, sizeof buf, ", %s %.3f", m.name.c_str(), m.value);
    extra += buf;
  }
  std::fprintf(stderr,
               "[%s] prompt %lld tokens, generated %lld tokens, %lld forwards (%.2f "
               "tokens/forward)%s, %.3f s, %.1f tokens/s, finish: %s\n",
               r.strategy.c_str(), static_cast<long long>(s.prompt_tokens),
               static_cast<long long>(s.generated_tokens), static_cast<long long>(s.forwards), tpf,
               extra.c_str(), s.seconds, tps, r.finish_reason.c_str());
  if (s.speculative) {
    const int64_t n = s.accepted + s.rejected;
    std::fprintf(stderr,
                 "[s2d2] %lld verify calls, %.2f accepted per verify, rejection rate %.3f, "
                 "%lld forwards (%lld draft + %lld verify), %.2f tokens/forward\n",
                 static_cast<long long>(s.verify_calls),
                 s.verify_calls ? double(s.accepted) / double(s.verify_calls) : 0.0,
                 n ? double(s.rejected) / double(n) : 0.0, static_cast<long long>(s.forwards),
                 static_cast<long long>(s.forwards - s.verify_calls),
                 static_cast<long long>(s.verify_calls), tpf);
  }
}

// The command line's prompt and knobs as one request.
Request request_from_args(const GenerateArgs& a) {
  Request r;
  if (!a.prompt_ids.empty()) {
    if (!a.prompt.empty() || a.chat) fail("--prompt-ids cannot be combined with -p or --chat");
    r.prompt_ids = parse_int_list(a.prompt_ids, "--prompt-ids");
  } else if (a.chat) {
    if (a.prompt.empty()) fail("--chat needs the user message in -p");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    if (a.images.empty() && a.videos.empty()) {
      messages.push_back({{"role", "user"}, {"content", a.prompt}});
    } else {  // content parts: the pictures and videos first, then the text
      nlohmann::ordered_json parts = nlohmann::ordered_json::array();
      for (size_t i = 0; i < a.images.size(); ++i) parts.push_back({{"type", "image"}});
      for (size_t i = 0; i < a.videos.size(); ++i) parts.push_back({{"type", "video"}});
      parts.push_back({{"type", "text"}, {"text", a.prompt}});
      messages.push_back({{"role", "user"}, {"content", parts}});
    }
    r.messages_json = messages.dump();
  } else {
    if (!a.system.empty()) fail("--system needs --chat");
    if (a.prompt.empty())
      fail("give a prompt: -p TEXT (raw), -p TEXT --chat, or --prompt-ids 1,2,3");
    r.prompt = a.prompt;
  }
  if (!a.enable_thinking.empty()) {
    if (a.enable_thinking != "true" && a.enable_thinking != "false")
      fail("--enable-thinking must be true or false (got '", a.enable_thinking, "')");
    r.chat_template_kwargs_json = nlohmann::json{{"enable_thinking", a.enable_thinking == "true"}}
                                      .dump();
  }
  if (a.sampling[0]->count()) r.temperature = a.temperature;
  if (a.sampling[1]->count()) r.top_k = a.top_k;
  if (a.sampling[2]->count()) r.top_p = a.top_p;
  r.seed = parse_seed(a.seed);
  r.image_files = a.images;
  r.video_files = a.videos;
  r.video_frames = a.frames;
  r.stop = a.stops;
  r.trace = a.trace;
  for (const auto& [name, opt] : a.knobs)
    if (opt->count() > 0) r.options[name] = a.knob_values.at(name);
  return r;
}

void run_one(const GenerateArgs& a) {
  const Request request = request_from_args(a);
  Engine engine(a.engine);
  const bool text = a.format == "text";
  const bool have_text = engine.model_info().has_tokenizer;
  const RequestResult r = engine.generate(request, [&](const RequestOutput& o) {
    if (o.trace_forward > 0)
      std::fprintf(stderr, "[trace %lld] %s\n", static_cast<long long>(o.trace_forward),
                   join_ids(o.canvas).c_str());
    if (text && have_text && !o.text.empty()) {
      std::fwrite(o.text.data(), 1, o.text.size(), stdout);
      std::fflush(stdout);
    }
  });
  if (r.finish_reason == "error") fail(r.error);
  if (text) {
    if (!have_text) std::printf("%s", join_ids(r.token_ids).c_str());  // no tokenizer: the ids
    std::printf("\n");
    print_stats_line(r);
  } else {
    std::printf("%s\n", result_to_json(r).dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace)
                            .c_str());
  }
}

// --requests: every line one request, all through one engine; results in input order. A line
// that is not a valid request gets an error result; the others run.
void run_batch(const GenerateArgs& a) {
  std::ifstream in(a.requests);
  if (!in) fail(a.requests, ": cannot open the requests file");
  std::vector<std::string> lines;
  std::vector<size_t> line_number;  // in the file (blank lines are skipped)
  size_t number = 0;
  for (std::string line; std::getline(in, line);)
    if (++number, line.find_first_not_of(" \t\r") != std::string::npos) {
      lines.push_back(line);
      line_number.push_back(number);
    }
  if (a.concurrency < 0) fail("--concurrency must be >= 0 (got ", a.concurrency, ")");
  const size_t limit = a.concurrency > 0 ? static_cast<size_t>(a.concurrency) : lines.size();

  Engine engine(a.engine);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::optional<nlohmann::ordered_json>> out(lines.size());
  std::vector<nlohmann::json> custom_ids(lines.size());
  std::mutex mu;
  std::condition_variable slot_free;
  size_t in_flight = 0, printed = 0;
  int64_t generated = 0;
  auto record = [&](size_t i, nlohmann::ordered_json j) {
    nlohmann::ordered_json line = {{"index", i}};
    if (!custom_ids[i].is_null()) line["custom_id"] = custom_ids[i];
    line.update(j);
    std::lock_guard g(mu);
    out[i] = std::move(line);
    for (; printed < out.size() && out[printed]; ++printed)
      std::printf("%s\n",
                  out[printed]->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                      .c_str());
    std::fflush(stdout);
  };
  std::vector<std::pair<uint64_t, size_t>> submitted;
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      const nlohmann::json j = nlohmann::json::parse(lines[i]);
      if (j.is_object() && j.contains("custom_id")) custom_ids[i] = j["custom_id"];
      const Request req = request_from_json(j);
      {
        std::unique_lock lk(mu);
        slot_free.wait(lk, [&] { return in_flight < limit; });
        ++in_flight;
      }
      try {
        submitted.emplace_back(engine.submit(req,
                                             [&](const RequestOutput& o) {
                                               if (!o.finished) return;
                                               std::lock_guard g(mu);
                                               --in_flight;
                                               slot_free.notify_all();
                                             }),
                               i);
      } catch (...) {
        std::lock_guard g(mu);
        --in_flight;
        throw;
      }
    } catch (const std::exception& e) {
      record(i, {{"finish_reason", "error"},
                 {"error", a.requests + " line " + std::to_string(line_number[i]) + ": " +
                               e.what()}});
    }
  }
  for (const auto& [id, i] : submitted) {
    const RequestResult r = engine.wait(id);
    generated += r.stats.generated_tokens;
    record(i, result_to_json(r));
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStats s = engine.stats();
  std::fprintf(stderr,
               "[engine] %zu requests (%lld finished, %lld errors) in %.3f s: %lld forwards, "
               "%.1f sequences and %.1f rows per forward, %lld generated tokens, %.1f tokens/s, "
               "%lld preemptions, %lld of %lld prompt tokens from the prefix cache\n",
               lines.size(), static_cast<long long>(s.finished),
               static_cast<long long>(lines.size() - submitted.size() + s.errors), secs,
               static_cast<long long>(s.steps), s.sequences_per_step,
               s.steps ? double(s.rows) / double(s.steps) : 0.0,
               static_cast<long long>(generated), secs > 0 ? double(generated) / secs : 0.0,
               static_cast<long long>(s.preemptions),
               static_cast<long long>(s.prefix_cached_tokens),
               static_cast<long long>(s.prompt_tokens));
}

void run_generate(GenerateArgs& a) {
  if (a.format != "text" && a.format != "json")
    fail("--format '", a.format, "' (expected text or json)");
  finish_engine_config(a.engine);
  if (a.requests.empty()) {
    if (a.concurrency != 0) fail("--concurrency needs --requests FILE.jsonl");
    run_one(a);
    return;
  }
  if (!a.prompt.empty() || !a.prompt_ids.empty() || a.chat)
    fail("--requests takes its prompts from the file; drop -p / --prompt-ids / --chat");
  run_batch(a);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("generate", "Generate text with a diffusion (or autoregressive) decoder");
  auto a = std::make_shared<GenerateArgs>();
  add_engine_options(*cmd, a->engine);
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text (raw), or the user message with --chat");
  cmd->add_flag("--chat", a->chat, "Apply the checkpoint's chat template to -p (a user turn)");
  cmd->add_option("--system", a->system, "System message (with --chat)");
  cmd->add_option("--enable-thinking", a->enable_thinking,
                  "true | false: the chat template's enable_thinking variable");
  cmd->add_option("--prompt-ids", a->prompt_ids,
                  "Prompt as comma-separated token ids (bypasses the tokenizer)");
  cmd->add_option("--requests", a->requests,
                  "Run every request of a JSON-lines file through one engine at once (keys as "
                  "the options: prompt | prompt_ids | messages, strategy, max_tokens, ...); one "
                  "JSON result per line, in input order");
  cmd->add_option("--image", a->images,
                  "Image (JPEG / PNG) for a vision-language model (repeatable): with --chat a "
                  "picture before the text; otherwise the prompt's <|image_pad|> placeholders "
                  "take them in order");
  cmd->add_option("--video", a->videos,
                  "Video for a vision-language model (repeatable), as --image");
  cmd->add_option("--frames", a->frames, "Frames sampled uniformly from each --video (default 32)");
  cmd->add_option("--concurrency", a->concurrency,
                  "--requests: at most this many requests in flight (default: all)");
  // Strategy knobs: the table every front end shares (decode/decode_options.h).
  for (const DecodeOption& o : decode_options()) {
    std::string& value = a->knob_values[o.name];
    CLI::Option* opt =
        o.flag ? cmd->add_flag_callback("--" + o.name, [&value] { value = "true"; }, o.help)
               : cmd->add_option("--" + o.name, value, o.help);
    if (!o.group.empty()) opt->group(o.group);
    a->knobs[o.name] = opt;
  }
  a->sampling = {cmd->add_option("--temperature", a->temperature, "0 = greedy (default)"),
                 cmd->add_option("--top-k", a->top_k, "0 = off"),
                 cmd->add_option("--top-p", a->top_p, "1 = off")};
  cmd->add_option("--seed", a->seed, "Sampling seed (default 0)");
  cmd->add_option("--stop", a->stops, "Stop string (repeatable); excluded from the output");
  cmd->add_option("--format", a->format, "text (stream) | json");
  cmd->add_flag("--trace", a->trace, "Print the decoder's canvas after every forward to stderr");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace dllm::cli
