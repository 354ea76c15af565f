// The routes around generation: the model list, health, metrics, and the tokenizer (vLLM's
// /tokenize and /detokenize, so clients can count tokens the way the server does).
#include <chrono>

#include "core/error.h"
#include "server/api_error.h"
#include "server/http_util.h"
#include "server/openai_request.h"
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

namespace {

// The prompt ids of a /tokenize chat body: its messages parsed as a chat completion's (image_url
// and video_url parts included, errors naming the part), rendered and tokenized, and each image
// or video placeholder expanded to the item's feature count: the tokens the model sees, as
// vLLM's /tokenize counts a multimodal prompt.
std::vector<int32_t> chat_prompt_ids(ServerContext& ctx, const Json& body) {
  ApiRequest api = parse_api_request(Endpoint::chat, body, ctx.parse);
  Request& r = api.prompts.at(0);
  const bool gen = bool_field(body, "add_generation_prompt").value_or(true);
  try {
    r.prompt_ids = ctx.engine.tokenize(
        ctx.engine.apply_chat_template(r.messages_json, gen, r.chat_template_kwargs_json));
    r.messages_json.clear();
    r.chat_template_kwargs_json.clear();
    if (r.image_bytes.empty() && r.video_bytes.empty()) return r.prompt_ids;
    return ctx.engine.prompt_token_ids(r);
  } catch (const Error& e) {
    throw engine_error(e.what(), "messages");  // a media part's error names the part
  }
}

}  // namespace

// {"prompt": "text"} or {"messages": [...], "add_generation_prompt": true} ->
// {"tokens": [...], "count": N, "max_model_len": L}
void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_body(req);
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  std::vector<int32_t> ids;
  if (field(body, "messages")) {
    ids = chat_prompt_ids(ctx, body);
  } else {
    const auto prompt = string_field(body, "prompt");
    if (!prompt) bad_request("prompt", "'prompt' (a string) or 'messages' is required");
    try {
      ids = ctx.engine.tokenize(*prompt);
    } catch (const Error& e) {
      throw ApiError(400, "invalid_request_error", "prompt", e.what());
    }
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
