#include "cli/request_json.h"

#include <cmath>

#include "core/error.h"

namespace dllm::cli {

namespace {

template <class T>
T get(const nlohmann::json& j, const char* key) {
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("request key \"", key, "\" has the wrong type (", j.at(key).type_name(), ")");
  }
}

// A knob's value as the command line spells it.
std::string option_text(const std::string& key, const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return v.dump();
  fail("request key \"", key, "\" must be a string, number or boolean (got ", v.type_name(), ")");
}

}  // namespace

Request request_from_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("a request must be a JSON object (got ", j.type_name(), ")");
  Request r;
  for (const auto& [key, v] : j.items()) {
    if (key == "prompt") {
      r.prompt = get<std::string>(j, "prompt");
    } else if (key == "prompt_ids") {
      r.prompt_ids = get<std::vector<int32_t>>(j, "prompt_ids");
      if (r.prompt_ids.empty()) fail("request key \"prompt_ids\" is empty");
    } else if (key == "messages") {
      if (!v.is_array()) fail("request key \"messages\" must be an array of messages");
      r.messages_json = v.dump();
    } else if (key == "chat_template_kwargs") {
      if (!v.is_object()) fail("request key \"chat_template_kwargs\" must be an object");
      r.chat_template_kwargs_json = v.dump();
    } else if (key == "strategy") {
      r.strategy = get<std::string>(j, "strategy");
    } else if (key == "max_tokens") {
      r.max_tokens = get<int32_t>(j, "max_tokens");
    } else if (key == "temperature") {
      r.temperature = get<float>(j, "temperature");
    } else if (key == "top_k") {
      r.top_k = get<int32_t>(j, "top_k");
    } else if (key == "top_p") {
      r.top_p = get<float>(j, "top_p");
    } else if (key == "seed") {
      r.seed = get<uint64_t>(j, "seed");
    } else if (key == "stop") {
      r.stop = v.is_string() ? std::vector<std::string>{v.get<std::string>()}
                             : get<std::vector<std::string>>(j, "stop");
    } else if (key == "stop_token_ids") {
      r.stop_token_ids = get<std::vector<int32_t>>(j, "stop_token_ids");
    } else if (key == "ignore_eos") {
      r.ignore_eos = get<bool>(j, "ignore_eos");
    } else if (key == "image_files") {  // vision-language models: paths, as --image
      r.image_files = get<std::vector<std::string>>(j, "image_files");
    } else if (key == "video_files") {
      r.video_files = get<std::vector<std::string>>(j, "video_files");
    } else if (key == "video_frames") {
      r.video_frames = get<int32_t>(j, "video_frames");
    } else if (key == "custom_id") {
      // copied to the result by the caller
    } else {
      r.options[key] = option_text(key, v);
    }
  }
  return r;
}

nlohmann::ordered_json result_to_json(const RequestResult& r) {
  const RequestStats& s = r.stats;
  const double tpf = s.forwards ? double(s.generated_tokens) / double(s.forwards) : 0.0;
  const double tps = s.seconds > 0 ? double(s.generated_tokens) / s.seconds : 0.0;
  nlohmann::ordered_json j = {{"ids", r.token_ids},
                              {"text", r.text},
                              {"finish_reason", r.finish_reason},
                              {"strategy", r.strategy}};
  if (!r.error.empty()) j["error"] = r.error;
  nlohmann::ordered_json st = {{"forwards", s.forwards},
                               {"prompt_tokens", s.prompt_tokens},
                               {"generated_tokens", s.generated_tokens},
                               {"tokens_per_forward", tpf},
                               {"query_rows", s.query_rows},
                               {"seconds", s.seconds},
                               {"tokens_per_second", tps},
                               {"queue_seconds", s.queue_seconds},
                               {"first_token_seconds", s.first_token_seconds},
                               {"prefix_cached_tokens", s.prefix_cached_tokens},
                               {"preemptions", s.preemptions}};
  for (const Metric& m : s.metrics) {
    if (m.is_count)
      st[m.name] = static_cast<long long>(m.value);
    else
      st[m.name] = m.value;
  }
  if (s.speculative) {
    const int64_t n = s.accepted + s.rejected;
    st["s2d2"] = {{"verify_calls", s.verify_calls},
                  {"accepted", s.accepted},
                  {"rejected", s.rejected},
                  {"accepted_per_verify",
                   s.verify_calls ? double(s.accepted) / double(s.verify_calls) : 0.0},
                  {"rejection_rate", n ? double(s.rejected) / double(n) : 0.0},
                  {"draft_forwards", s.forwards - s.verify_calls},
                  {"verify_forwards", s.verify_calls}};
  }
  j["stats"] = std::move(st);
  return j;
}

}  // namespace dllm::cli
