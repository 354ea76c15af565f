#include "server/openai_request.h"

#include <algorithm>

#include "core/error.h"
#include "server/api_error.h"

namespace dllm::server {

namespace {

constexpr size_t kMaxStops = 16;
constexpr size_t kMaxStopTokenIds = 256;
constexpr size_t kMaxPromptIds = size_t{1} << 24;

void check_model(const Json& body, const ParseContext& ctx) {
  const auto model = string_field(body, "model");
  if (model && *model != ctx.served_model)
    throw ApiError(404, "not_found_error", "model",
                   cat("The model '", *model, "' does not exist; this server serves '",
                       ctx.served_model, "'"));
}

std::vector<int32_t> token_ids(const Json& v, const ParseContext& ctx) {
  if (v.empty()) bad_request("prompt", "'prompt' has an empty list of token ids");
  if (v.size() > kMaxPromptIds) bad_request("prompt", "'prompt' has too many token ids");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const Json& x : v) {
    if (!x.is_number_integer())
      bad_request("prompt", cat("'prompt' token ids must be integers (got ", json_type(x), ")"));
    const int64_t id =
        x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : x.get<int64_t>();
    if (id < 0 || id >= ctx.vocab_size)
      bad_request("prompt", cat("'prompt' token id ", json_excerpt(x), " is outside [0, ",
                                ctx.vocab_size, ")"));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// Completions: a string, [strings], [ids] or [[ids]]; one Request per prompt.
std::vector<Request> completion_prompts(const Json& body, const ParseContext& ctx) {
  const Json* p = field(body, "prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  std::vector<Request> out;
  auto text = [&](const Json& s) {
    Request r;
    r.prompt = s.get<std::string>();
    if (r.prompt.empty()) bad_request("prompt", "'prompt' must not be empty");
    out.push_back(std::move(r));
  };
  if (p->is_string()) {
    text(*p);
  } else if (p->is_array() && !p->empty() && p->front().is_number()) {
    out.emplace_back().prompt_ids = token_ids(*p, ctx);
  } else if (p->is_array() && !p->empty()) {
    if (p->size() > size_t(ctx.max_choices))
      bad_request("prompt", cat("'prompt' has ", p->size(), " prompts; at most ", ctx.max_choices,
                                " are accepted"));
    for (const Json& item : *p) {
      if (item.is_string())
        text(item);
      else if (item.is_array())
        out.emplace_back().prompt_ids = token_ids(item, ctx);
      else
        bad_request("prompt", cat("'prompt' list items must be strings or lists of token ids "
                                  "(got ",
                                  json_type(item), ")"));
    }
  } else {
    bad_request("prompt", cat("'prompt' must be a string, a list of strings or a list of token "
                              "ids (got ",
                              p->is_array() ? "an empty list" : json_type(*p), ")"));
  }
  return out;
}

// The text of a {"type": "text", "text": ...} part.
const std::string& text_part(const Json& part, const std::string& where) {
  const Json* t = field(part, "text");
  if (!t || !t->is_string())
    bad_request(where, cat("'", where, "' text parts need a string 'text'"));
  return t->get_ref<const std::string&>();
}

// The URL of a {"type": "image_url", "image_url": {"url": ...}} part, or of a video_url part (a
// bare string accepted, as vLLM does; "detail" is ignored: the processor's tiling decides the
// resolution).
std::string media_part_url(const Json& part, const std::string& key, const std::string& where) {
  const Json* u = field(part, key);
  if (u && u->is_object()) u = field(*u, "url");
  if (!u || !u->is_string())
    bad_request(where, cat("'", where, "' ", key, " parts need {\"", key, "\": {\"url\": ...}}"));
  return u->get<std::string>();
}

// The images and videos of a chat request, in order.
struct ChatMedia {
  std::vector<ImageBytes> images;
  std::vector<VideoBytes> videos;
};

// An image_url or video_url part: its bytes appended to `media`, checked against the limits.
void add_media_part(const Json& part, MediaKind kind, const std::string& where,
                    const ParseContext& ctx, ChatMedia& media) {
  const bool video = kind == MediaKind::video;
  const char* noun = video ? "video" : "image";
  if (!ctx.accepts_images)
    bad_request(where,
                cat("'", where, "' is ", video ? "a " : "an ", noun, ", but this model ('",
                    ctx.served_model, "') is not a vision-language model and takes text only"));
  std::vector<MediaBytes>& list = video ? media.videos : media.images;
  const int limit = video ? ctx.max_videos : ctx.max_images;
  if (list.size() >= size_t(limit))
    bad_request(where, cat("'", where, "' is ", noun, " ", list.size() + 1,
                           " of the request; accepted are 1 to ", limit, " ", noun,
                           "s per request (--max-", noun, "s-per-request)"));
  list.push_back(media_from_url(
      kind, media_part_url(part, video ? "video_url" : "image_url", where), where, ctx.media));
}

// A message's content as the template sees it: a string, or, when no image or video is in it,
// text parts joined by newlines (as vLLM does). With media, the parts in order as
// {"type": "image"}, {"type": "video"} and {"type": "text"} (the form SDAR-VL's template writes
// <|image_pad|> / <|video_pad|> for); their bytes go to `media`.
Json message_content(const Json& c, size_t i, const ParseContext& ctx, ChatMedia& media) {
  const std::string where = cat("messages[", i, "].content");
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (!c.is_array())
    bad_request(where, cat("'", where, "' must be a string or a list of content parts (got ",
                           json_type(c), ")"));
  Json parts = Json::array();
  std::string text;
  bool has_media = false;
  for (size_t j = 0; j < c.size(); ++j) {
    const Json& part = c[j];
    const std::string part_where = cat(where, "[", j, "]");
    const Json* type = part.is_object() ? field(part, "type") : nullptr;
    if (type && *type == "text") {
      const std::string& t = text_part(part, part_where);
      parts.push_back({{"type", "text"}, {"text", t}});
      text += (text.empty() ? "" : "\n") + t;
    } else if (type && (*type == "image_url" || *type == "video_url")) {
      const bool video = *type == "video_url";
      add_media_part(part, video ? MediaKind::video : MediaKind::image, part_where, ctx, media);
      parts.push_back({{"type", video ? "video" : "image"}});
      has_media = true;
    } else {
      bad_request(where,
                  cat("'", where, "' parts must be {\"type\": \"text\", \"text\": ...}",
                      ctx.accepts_images
                          ? ", {\"type\": \"image_url\", ...} or {\"type\": \"video_url\", ...}"
                          : "",
                      " (other content types are not supported; got ", json_excerpt(part), ")"));
    }
  }
  return has_media ? parts : Json(text);
}

// Chat: the messages as the template's JSON (role and content), images in their order.
Request chat_prompt(const Json& body, const ParseContext& ctx) {
  const Json* m = field(body, "messages");
  if (!m) bad_request("messages", "'messages' is required");
  if (!m->is_array() || m->empty())
    bad_request("messages", "'messages' must be a non-empty list of {role, content} objects");
  Request r;
  ChatMedia media;
  Json messages = Json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const Json& msg = (*m)[i];
    if (!msg.is_object())
      bad_request(cat("messages[", i, "]"),
                  cat("'messages[", i, "]' must be an object (got ", json_type(msg), ")"));
    const Json* role = field(msg, "role");
    if (!role || !role->is_string())
      bad_request(cat("messages[", i, "].role"), cat("'messages[", i, "].role' must be a string"));
    const auto content = msg.find("content");
    messages.push_back(
        {{"role", *role},
         {"content", message_content(content == msg.end() ? Json() : *content, i, ctx, media)}});
  }
  r.messages_json = messages.dump();
  r.image_bytes = std::move(media.images);
  r.video_bytes = std::move(media.videos);
  r.video_frames = ctx.video_frames;
  if (const Json* kw = field(body, "media_io_kwargs"))
    if (auto frames = media_io_video_frames(*kw, "media_io_kwargs")) r.video_frames = *frames;
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object())
      bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_template_kwargs_json = kw->dump();
  }
  return r;
}

// OpenAI fields dllm cannot honour: fine at their neutral value, refused otherwise.
void check_unsupported(const Json& body) {
  auto refuse = [](const std::string& key, const std::string& why) {
    bad_request(key, cat("'", key, "' ", why));
  };
  for (const char* key : {"presence_penalty", "frequency_penalty"})
    if (const auto x = number_field(body, key, -2, 2); x && *x != 0)
      refuse(key, "is not supported (only 0)");
  if (const auto x = number_field(body, "repetition_penalty", 0, 1e6); x && *x != 1)
    refuse("repetition_penalty", "is not supported (only 1)");
  if (const Json* v = field(body, "logprobs");
      v && !(v->is_boolean() && !v->get<bool>()) && !(v->is_number_integer() && *v == 0))
    refuse("logprobs", "is not supported");
  if (const auto x = int_field(body, "top_logprobs", 0, 20); x && *x != 0)
    refuse("top_logprobs", "is not supported");
  if (bool_field(body, "echo").value_or(false)) refuse("echo", "is not supported");
  if (const auto s = string_field(body, "suffix"); s && !s->empty())
    refuse("suffix", "is not supported");
  if (const Json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty()))
    refuse("logit_bias", "is not supported");
  if (const Json* v = field(body, "tools"); v && !(v->is_array() && v->empty()))
    refuse("tools", "is not supported (no tool calling)");
  if (const Json* v = field(body, "response_format");
      v && !(v->is_object() && v->contains("type") && (*v)["type"] == "text"))
    refuse("response_format", "is not supported (only {\"type\": \"text\"})");
  if (const Json* v = field(body, "min_tokens"); v && !(v->is_number_integer() && *v == 0))
    refuse("min_tokens", "is not supported");
}

// A knob's value as the command line spells it.
std::string knob_text(const std::string& key, const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return v.dump();
  if (v.is_number_float()) return v.dump();
  bad_request(key, cat("'", key, "' must be a string, number or boolean (got ", json_type(v), ")"));
}

// Sampling fields and dLLM knobs shared by every prompt of the request.
Request common_fields(Endpoint endpoint, const Json& body, const ParseContext& ctx) {
  Request r;
  const int64_t ctx_len = ctx.context_length > 0 ? ctx.context_length : int64_t{1} << 24;
  std::optional<int64_t> max_tokens = int_field(body, "max_tokens", 1, ctx_len);
  if (endpoint == Endpoint::chat)
    if (auto m = int_field(body, "max_completion_tokens", 1, ctx_len)) max_tokens = m;
  if (max_tokens) r.max_tokens = static_cast<int32_t>(*max_tokens);
  if (auto t = number_field(body, "temperature", 0, 1e4)) r.temperature = static_cast<float>(*t);
  if (auto p = number_field(body, "top_p", 0, 1)) {
    if (*p == 0) bad_request("top_p", "'top_p' must be in (0, 1] (got 0)");
    r.top_p = static_cast<float>(*p);
  }
  if (auto k = int_field(body, "top_k", -1, ctx.vocab_size))
    r.top_k = static_cast<int32_t>(std::max<int64_t>(*k, 0));
  if (auto s = int_field(body, "seed", INT64_MIN, INT64_MAX)) r.seed = static_cast<uint64_t>(*s);
  r.stop = strings_field(body, "stop", kMaxStops);
  r.stop_token_ids = ints_field(body, "stop_token_ids", 0, ctx.vocab_size - 1, kMaxStopTokenIds);
  r.ignore_eos = bool_field(body, "ignore_eos").value_or(false);
  if (auto s = string_field(body, "strategy")) r.strategy = *s;
  if (auto s = string_field(body, "sparse_prefill")) {
    if (!ctx.sparse_prefill_names.count(*s)) {
      std::string names;
      for (const std::string& n : ctx.sparse_prefill_names)
        names += (names.empty() ? "" : ", ") + n;
      bad_request("sparse_prefill",
                  cat("'sparse_prefill' must name a config the server loaded from "
                      "--sparse-prefill-dir, or \"none\" (got \"",
                      *s, "\"; accepted: ", names, ")"));
    }
    r.sparse_prefill = *s;
  }
  for (const auto& [key, v] : body.items()) {
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');
    if (ctx.option_names.count(name) && !v.is_null()) r.options[name] = knob_text(key, v);
  }
  return r;
}

}  // namespace

std::optional<int32_t> media_io_video_frames(const Json& kwargs, const std::string& where) {
  if (!kwargs.is_object()) bad_request(where, cat("'", where, "' must be an object"));
  const Json* video = field(kwargs, "video");
  if (!video) return std::nullopt;
  const std::string video_where = where + ".video";
  if (!video->is_object()) bad_request(video_where, cat("'", video_where, "' must be an object"));
  for (const auto& [key, v] : video->items())
    if (key != "num_frames")
      bad_request(video_where + "." + key,
                  cat("'", video_where, ".", key,
                      "' is not supported (dllm samples num_frames frames uniformly over the "
                      "whole video; only num_frames is accepted)"));
  const Json* n = field(*video, "num_frames");
  if (!n) return std::nullopt;
  const std::string n_where = video_where + ".num_frames";
  if (!n->is_number_integer() || n->get<int64_t>() < 1 || n->get<int64_t>() > 1024 ||
      (n->is_number_unsigned() && n->get<uint64_t>() > 1024))
    bad_request(n_where, cat("'", n_where, "' must be an integer in [1, 1024] (got ",
                             json_excerpt(*n), ")"));
  return static_cast<int32_t>(n->get<int64_t>());
}

ApiRequest parse_api_request(Endpoint endpoint, const Json& body, const ParseContext& ctx) {
  if (!body.is_object())
    bad_request("", cat("the request body must be a JSON object (got ", json_type(body), ")"));
  check_model(body, ctx);
  check_unsupported(body);
  ApiRequest out;
  out.endpoint = endpoint;
  out.n = static_cast<int>(int_field(body, "n", 1, ctx.max_choices).value_or(1));
  if (auto best_of = int_field(body, "best_of", 1, ctx.max_choices); best_of && *best_of != out.n)
    bad_request("best_of", "'best_of' is not supported (only equal to n)");
  out.stream = bool_field(body, "stream").value_or(false);
  if (const Json* so = field(body, "stream_options")) {
    if (!out.stream) bad_request("stream_options", "'stream_options' needs \"stream\": true");
    if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object");
    out.include_usage = bool_field(*so, "include_usage").value_or(false);
  }
  if (const Json* d = field(body, "dllm")) {
    if (!d->is_object()) bad_request("dllm", "'dllm' must be an object");
    out.stream_provisional = bool_field(*d, "stream_provisional").value_or(false);
    if (out.stream_provisional && !out.stream)
      bad_request("dllm.stream_provisional", "'dllm.stream_provisional' needs \"stream\": true");
  }
  out.return_token_ids = bool_field(body, "return_token_ids").value_or(false);

  const Request common = common_fields(endpoint, body, ctx);
  std::vector<Request> prompts = endpoint == Endpoint::chat
                                     ? std::vector<Request>{chat_prompt(body, ctx)}
                                     : completion_prompts(body, ctx);
  if (prompts.size() * size_t(out.n) > size_t(ctx.max_choices))
    bad_request("n", cat(prompts.size(), " prompts x n = ", out.n, " is more than the ",
                         ctx.max_choices, " choices one request may ask for"));
  for (Request& p : prompts) {
    Request r = common;
    r.prompt = std::move(p.prompt);
    r.prompt_ids = std::move(p.prompt_ids);
    r.messages_json = std::move(p.messages_json);
    r.chat_template_kwargs_json = std::move(p.chat_template_kwargs_json);
    r.image_bytes = std::move(p.image_bytes);
    r.video_bytes = std::move(p.video_bytes);
    r.video_frames = p.video_frames;
    r.trace = out.stream_provisional;
    out.prompts.push_back(std::move(r));
  }
  return out;
}

}  // namespace dllm::server
