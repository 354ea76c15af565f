// The routes around generation: the model list, health, metrics, and the tokenizer (vLLM's
// /tokenize and /detokenize, so clients can count tokens the way the server does).
#include <chrono>

#include "core/error.h"
#include "server/http_util.h"
#include "server/routes.h"

namespace dllm::server {

void handle_models(ServerContext& ctx, httplib::Response& res) {
  static const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
  Json model = {{"id", ctx.model_name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "dllm"},
                {"root", ctx.info.dir},
                {"max_model_len", ctx.info.context_length},
                {"dllm",
                 {{"family", ctx.info.family},
                  {"model_type", ctx.info.model_type},
                  {"default_strategy", ctx.info.default_strategy},
                  {"device", ctx.info.device},
                  {"parameters", ctx.info.parameters}}}};
  send_json(res, 200, {{"object", "list"}, {"data", Json::array({model})}});
}

void handle_health(ServerContext& ctx, httplib::Response& res) {
  if (ctx.admission.draining())
    send_json(res, 503, {{"status", "shutting down"}});
  else
    send_json(res, 200, {{"status", "ok"}});
}

void handle_metrics(ServerContext& ctx, httplib::Response& res) {
  res.set_content(ctx.metrics.render(ctx.engine.stats(), ctx.admission.in_flight()),
                  "text/plain; version=0.0.4; charset=utf-8");
}

// {"prompt": "text"} or {"messages": [...], "add_generation_prompt": true} ->
// {"tokens": [...], "count": N, "max_model_len": L}
void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req);
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  std::vector<int32_t> ids;
  try {
    if (const Json* m = field(body, "messages")) {
      if (!m->is_array()) bad_request("messages", "'messages' must be a list");
      const bool gen = bool_field(body, "add_generation_prompt").value_or(true);
      ids = ctx.engine.tokenize(ctx.engine.apply_chat_template(m->dump(), gen));
    } else {
      const auto prompt = string_field(body, "prompt");
      if (!prompt) bad_request("prompt", "'prompt' (a string) or 'messages' is required");
      ids = ctx.engine.tokenize(*prompt);
    }
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", field(body, "messages") ? "messages" : "prompt",
                   e.what());
  }
  send_json(res, 200,
            {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.info.context_length}});
}

// {"tokens": [...]} -> {"prompt": "text"}
void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req);
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  if (!field(body, "tokens")) bad_request("tokens", "'tokens' (a list of token ids) is required");
  const std::vector<int32_t> ids =
      ints_field(body, "tokens", 0, ctx.info.vocab_size - 1, size_t{1} << 24);
  try {
    send_json(res, 200, {{"prompt", ctx.engine.detokenize(ids, true)}});
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", "tokens", e.what());
  }
}

}  // namespace dllm::server
