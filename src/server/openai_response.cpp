#include "server/openai_response.h"

#include <chrono>
#include <cstdio>
#include <random>

namespace dllm::server {

namespace {

const char* object_name(Endpoint e, bool chunk) {
  if (e == Endpoint::completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

Json head_json(const ResponseHead& h, bool chunk) {
  return {{"id", h.id},
          {"object", object_name(h.endpoint, chunk)},
          {"created", h.created},
          {"model", h.model}};
}

// A random 96-bit id: unique enough for logs and clients, and says nothing about load.
std::string random_hex() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

}  // namespace

ResponseHead new_response_head(Endpoint endpoint, const std::string& model) {
  ResponseHead h;
  h.endpoint = endpoint;
  h.id = (endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-") + random_hex();
  h.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  h.model = model;
  return h;
}

std::string api_finish_reason(const std::string& r) {
  if (r == "cancelled") return "abort";
  return r;
}

Json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

Json full_response(const ResponseHead& head, const std::vector<ChoiceResult>& choices,
                   const Usage& usage, bool return_token_ids) {
  Json out = head_json(head, false);
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    Json choice = {{"index", i}};
    if (head.endpoint == Endpoint::chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      choice["text"] = c.text;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = api_finish_reason(c.finish_reason);
    if (return_token_ids) choice["token_ids"] = c.token_ids;
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

Json stream_chunk(const ResponseHead& head, const ChunkDelta& d, bool return_token_ids,
                  bool usage_null) {
  Json out = head_json(head, true);
  Json choice = {{"index", d.index}};
  if (head.endpoint == Endpoint::chat) {
    Json delta = Json::object();
    if (d.role) delta["role"] = "assistant";
    if (d.role || !d.finish_reason) delta["content"] = d.text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = d.text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] =
      d.finish_reason ? Json(api_finish_reason(*d.finish_reason)) : Json(nullptr);
  if (return_token_ids) choice["token_ids"] = d.token_ids;
  out["choices"] = Json::array({std::move(choice)});
  if (usage_null) out["usage"] = nullptr;
  return out;
}

Json usage_chunk(const ResponseHead& head, const Usage& usage) {
  Json out = head_json(head, true);
  out["choices"] = Json::array();
  out["usage"] = usage_json(usage);
  return out;
}

Json provisional_chunk(const ResponseHead& head, int index, int64_t forward,
                       int64_t committed_tokens, const std::string& text,
                       const std::vector<int32_t>& token_ids) {
  Json out = head_json(head, true);
  out["choices"] = Json::array();
  out["dllm"] = {{"provisional", true}, {"index", index},
                 {"forward", forward},  {"committed_tokens", committed_tokens},
                 {"text", text},        {"token_ids", token_ids}};
  return out;
}

std::string sse_event(const Json& j) {
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace dllm::server
