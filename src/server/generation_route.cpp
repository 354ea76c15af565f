// POST /v1/completions and /v1/chat/completions: parse, tokenize (checking the prompt limit),
// admit, submit prompts x n engine requests, then answer from their events — streamed as SSE
// chunks, or one JSON object at the end. Both answers are written by a content provider that
// waits for the engine's events, so a client that goes away is noticed (the socket stops being
// writable) while its request runs, and the request is cancelled.
#include <memory>

#include "core/error.h"
#include "server/generation_group.h"
#include "server/http_util.h"
#include "server/openai_response.h"
#include "server/routes.h"

namespace dllm::server {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);  // how often a waiting response checks
                                                       // that its client is still there

// Tokenizes the prompt here (once), where its length can be checked; the request then carries
// the ids.
int64_t resolve_prompt(ServerContext& ctx, Endpoint endpoint, Request& r) {
  const std::string param = endpoint == Endpoint::chat ? "messages" : "prompt";
  try {
    if (!r.messages_json.empty()) {
      r.prompt_ids = ctx.engine.tokenize(
          ctx.engine.apply_chat_template(r.messages_json, true, r.chat_template_kwargs_json));
      r.messages_json.clear();
      r.chat_template_kwargs_json.clear();
    } else if (!r.prompt.empty()) {
      r.prompt_ids = ctx.engine.tokenize(r.prompt);
      r.prompt.clear();
    }
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", param, e.what());
  }
  const auto n = static_cast<int64_t>(r.prompt_ids.size());
  if (n == 0) bad_request(param, cat("'", param, "' has no tokens"));
  if (n > ctx.max_prompt_tokens)
    bad_request(param, cat("'", param, "' has ", n, " tokens; at most ", ctx.max_prompt_tokens,
                           " are accepted (--max-prompt-tokens)"));
  return n;
}

// prompts x n engine requests, choice index = prompt * n + j (as vLLM). With a seed, choice j
// samples with seed + j, so n > 1 gives n different samples that repeat request to request.
std::vector<Request> expand_choices(const ApiRequest& api) {
  std::vector<Request> out;
  for (const Request& p : api.prompts)
    for (int j = 0; j < api.n; ++j) {
      Request r = p;
      if (r.seed) r.seed = *r.seed + static_cast<uint64_t>(j);
      out.push_back(std::move(r));
    }
  return out;
}

// The undecided region of a provisional canvas as text: decided tokens detokenized, every mask
// shown as U+2591 (light shade).
std::string provisional_text(const Engine& engine, int64_t mask_id,
                             const std::vector<int32_t>& ids) {
  std::string out;
  std::vector<int32_t> run;
  auto flush = [&] {
    if (!run.empty()) out += engine.detokenize(run, true);
    run.clear();
  };
  for (int32_t id : ids) {
    if (id == mask_id) {
      flush();
      out += "\xe2\x96\x91";
    } else {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

// One response in progress: the group of engine requests and what has been sent.
struct ResponseState {
  ResponseState(ServerContext& c, ApiRequest a, std::vector<int64_t> prompt_tokens)
      : ctx(c),
        api(std::move(a)),
        prompt_tokens(std::move(prompt_tokens)),
        group(c.engine, c.admission, c.metrics) {
    ++ctx.open_responses;
  }
  ~ResponseState() { --ctx.open_responses; }
  ResponseState(const ResponseState&) = delete;
  ResponseState& operator=(const ResponseState&) = delete;
  ServerContext& ctx;
  ApiRequest api;
  std::vector<int64_t> prompt_tokens;  // per prompt
  GenerationGroup group;
  ResponseHead head;
  std::vector<ChoiceResult> choices;
  size_t finished = 0;
  bool started = false, ended = false;
  std::chrono::steady_clock::time_point last_check;  // of the client's connection
  std::string error;                                 // a choice that failed while running

  Usage usage() const {
    Usage u;
    for (int64_t p : prompt_tokens) u.prompt_tokens += p;
    for (const ChoiceResult& c : choices)
      u.completion_tokens += static_cast<int64_t>(c.token_ids.size());
    return u;
  }
};

// Applies one engine event to the state; returns the SSE text to send when streaming.
std::string apply_event(ResponseState& st, const GenerationGroup::Event& ev) {
  const RequestOutput& o = ev.output;
  ChoiceResult& c = st.choices[ev.choice];
  const bool stream = st.api.stream, ids = st.api.return_token_ids;
  const bool usage_null = st.api.include_usage;
  std::string out;
  if (o.trace_forward > 0) {
    if (stream && st.api.stream_provisional) {
      const auto k = static_cast<int64_t>(c.token_ids.size());
      const std::vector<int32_t> tail(o.canvas.begin() + std::min<size_t>(k, o.canvas.size()),
                                      o.canvas.end());
      out += sse_event(provisional_chunk(
          st.head, ev.choice, o.trace_forward, k,
          provisional_text(st.ctx.engine, st.ctx.info.mask_token_id, tail), tail));
    }
    return out;
  }
  c.text += o.text;
  c.token_ids.insert(c.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
  if (stream && (!o.token_ids.empty() || !o.text.empty()))
    out += sse_event(
        stream_chunk(st.head, {ev.choice, o.text, o.token_ids, {}, false}, ids, usage_null));
  if (o.finished) {
    const RequestResult result = st.group.result(ev.choice);  // the engine keeps it until then
    // Images and videos expand their placeholders in the engine: usage counts the prompt it ran.
    const size_t prompt = static_cast<size_t>(ev.choice / st.api.n);
    const Request& asked = st.api.prompts[prompt];
    if ((!asked.image_bytes.empty() || !asked.video_bytes.empty()) &&
        result.stats.prompt_tokens > 0)
      st.prompt_tokens[prompt] = result.stats.prompt_tokens;
    ++st.finished;
    c.finish_reason = o.finish_reason;
    if (o.finish_reason == "error") {
      st.error = o.error;
      if (stream) out += sse_event(error_body(ApiError(500, "server_error", "", o.error)));
    } else if (stream) {
      out += sse_event(
          stream_chunk(st.head, {ev.choice, "", {}, o.finish_reason, false}, ids, usage_null));
    }
  }
  return out;
}

// The opening chunks: chat choices announce the assistant role.
std::string opening(ResponseState& st) {
  std::string out;
  if (st.api.stream && st.head.endpoint == Endpoint::chat)
    for (size_t i = 0; i < st.choices.size(); ++i)
      out += sse_event(stream_chunk(st.head, {static_cast<int>(i), "", {}, {}, true},
                                    st.api.return_token_ids, st.api.include_usage));
  return out;
}

// After the last event: the usage chunk and [DONE], or the whole JSON response.
std::string closing(ResponseState& st) {
  if (st.api.stream) {
    std::string out;
    if (st.api.include_usage) out += sse_event(usage_chunk(st.head, st.usage()));
    return out + kSseDone;
  }
  if (!st.error.empty())  // the status line went out already; the body says what failed
    return error_body(ApiError(500, "server_error", "", st.error))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return full_response(st.head, st.choices, st.usage(), st.api.return_token_ids)
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The content provider: called by the HTTP thread until the response ends. Returning false
// drops the connection.
bool provide(ResponseState& st, httplib::DataSink& sink) {
  auto send = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
  if (!st.started) {
    st.started = true;
    return send(opening(st));
  }
  if (st.finished == st.choices.size()) {
    if (!send(closing(st))) return false;
    st.ended = true;
    sink.done();
    return true;
  }
  // Whether the client is still there, at most every kPoll (false once it has gone): a
  // response that writes nothing while it waits (a whole response, a stream between blocks)
  // would not notice otherwise.
  const auto now = std::chrono::steady_clock::now();
  if (now - st.last_check >= kPoll) {
    st.last_check = now;
    if (!sink.is_writable()) return false;
  }
  auto ev = st.group.next(kPoll);
  return !ev || send(apply_event(st, *ev));
}

}  // namespace

void handle_generation(ServerContext& ctx, Endpoint endpoint, const httplib::Request& req,
                       httplib::Response& res) {
  ApiRequest api = parse_api_request(endpoint, parse_body(req), ctx.parse);
  std::vector<int64_t> prompt_tokens;
  for (Request& r : api.prompts) prompt_tokens.push_back(resolve_prompt(ctx, endpoint, r));
  const std::vector<Request> choices = expand_choices(api);

  switch (ctx.admission.try_admit(static_cast<int64_t>(choices.size()))) {
    case Admission::Verdict::admitted:
      break;
    case Admission::Verdict::full:
      res.set_header("Retry-After", "1");
      throw ApiError(429, "rate_limit_error", "",
                     cat("the server is at capacity (", ctx.options.max_running, " running + ",
                         ctx.options.max_queued, " queued requests, --max-queued); retry later"));
    case Admission::Verdict::draining:
      throw ApiError(503, "service_unavailable", "", "the server is shutting down");
  }
  auto st = std::make_shared<ResponseState>(ctx, std::move(api), std::move(prompt_tokens));
  st->head = new_response_head(endpoint, ctx.model_name);
  st->choices.resize(choices.size());
  try {
    st->group.submit(choices);  // releases the admission itself on failure
  } catch (const Error& e) {
    throw engine_error(e.what(), "");
  }
  auto provider = [st](size_t, httplib::DataSink& sink) { return provide(*st, sink); };
  auto releaser = [st](bool) {
    if (!st->ended) {  // the client went away (or the server stops): cancel what runs
      st->ctx.metrics.client_disconnected();
      st->group.cancel();
    }
  };
  if (st->api.stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", provider, releaser);
  } else {
    res.set_chunked_content_provider("application/json", provider, releaser);
  }
}

}  // namespace dllm::server
