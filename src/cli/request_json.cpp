#include "cli/request_json.h"

#include <cmath>
#include <limits>

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

// A JSON whole number that fits int32: floats and values out of range are refused, never cut.
int32_t whole(const nlohmann::json& v, const char* key) {
  constexpr int64_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    const int64_t x = v.get<int64_t>();
    if (x >= lo && x <= hi) return static_cast<int32_t>(x);
  } else if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(hi)) {
    return static_cast<int32_t>(v.get<uint64_t>());
  }
  fail("request key \"", key, "\" must be a whole number in [", lo, ", ", hi, "] (got ", v.dump(),
       ")");
}

std::vector<int32_t> whole_list(const nlohmann::json& v, const char* key) {
  if (!v.is_array()) fail("request key \"", key, "\" must be a list of token ids");
  std::vector<int32_t> out;
  for (const auto& x : v) out.push_back(whole(x, key));
  return out;
}

// As the server reads it: 0..2^64-1, or a negative 64-bit number in two's complement.
uint64_t seed_value(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return static_cast<uint64_t>(v.get<int64_t>());
  fail("request key \"seed\" must be a whole number in [-2^63, 2^64-1] (got ", v.dump(), ")");
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
      r.prompt_ids = whole_list(v, "prompt_ids");
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
      r.max_tokens = whole(v, "max_tokens");
    } else if (key == "temperature") {
      r.temperature = get<float>(j, "temperature");
    } else if (key == "top_k") {
      r.top_k = whole(v, "top_k");
    } else if (key == "top_p") {
      r.top_p = get<float>(j, "top_p");
    } else if (key == "seed") {
      r.seed = seed_value(v);
    } else if (key == "stop") {
      r.stop = v.is_string() ? std::vector<std::string>{v.get<std::string>()}
                             : get<std::vector<std::string>>(j, "stop");
    } else if (key == "stop_token_ids") {
      r.stop_token_ids = whole_list(v, "stop_token_ids");
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
