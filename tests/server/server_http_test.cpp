// `dllm serve` end to end over raw HTTP (cpp-httplib's client): the real binary on a free
// loopback port with the embedded default model. Completions and chat, streamed and whole,
// stop strings, usage, every error path, disconnects, a full queue, 64 concurrent clients of
// mixed strategies whose results equal `dllm generate` running each request alone, and SIGTERM.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "server/server_process.h"
#include "support/sparse_prefill_config_file.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using Json = nlohmann::json;
using test::ServerProcess;

struct Reply {
  int status = 0;
  Json body;
  std::string retry_after;
};

Reply post(int port, const std::string& path, const std::string& body,
           const httplib::Headers& headers = {}) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  auto r = c.Post(path.c_str(), headers, body, "application/json");
  Reply out;
  if (!r) {
    ADD_FAILURE() << "no response for " << path;
    return out;
  }
  out.status = r->status;
  out.retry_after = r->get_header_value("Retry-After");
  out.body = Json::parse(r->body, nullptr, false);
  return out;
}

Reply post(int port, const std::string& path, const Json& body) {
  return post(port, path, body.dump());
}

std::string get(int port, const std::string& path, int* status = nullptr) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get(path.c_str());
  if (status) *status = r ? r->status : 0;
  return r ? r->body : "";
}

// A streamed request's events (the JSON of every "data:" line; [DONE] as the string "[DONE]").
// `keep_reading` sees each event and may return false to hang up.
std::vector<Json> stream(int port, const std::string& path, const Json& body,
                         const std::function<bool(const Json&)>& keep_reading = {}) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buffer;
  std::vector<Json> events;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
      const std::string payload = event.substr(6);
      events.push_back(payload == "[DONE]" ? Json("[DONE]") : Json::parse(payload));
      if (keep_reading && !keep_reading(events.back())) return false;
    }
    return true;
  };
  c.send(req);
  return events;
}

// A metric's value in /metrics text (-1 when absent).
double metric(int port, const std::string& name) {
  const std::string text = get(port, "/metrics");
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

Json chat_body(const std::string& user, int max_tokens) {
  return {{"model", "tiny-block"},
          {"messages", {{{"role", "user"}, {"content", user}}}},
          {"max_tokens", max_tokens}};
}

// What a streamed response adds up to: content per choice, ids, finish reasons, usage.
struct Streamed {
  std::string text;
  std::vector<int32_t> ids;
  std::string finish_reason;
  Json usage;
  bool done = false;
  int provisional = 0;
};

Streamed collect(const std::vector<Json>& events) {
  Streamed s;
  for (const Json& e : events) {
    if (e == "[DONE]") {
      s.done = true;
      continue;
    }
    if (e.contains("dllm")) {
      EXPECT_TRUE(e["dllm"]["provisional"].get<bool>());
      EXPECT_TRUE(e["choices"].empty());
      ++s.provisional;
      continue;
    }
    if (e.contains("usage") && !e["usage"].is_null()) s.usage = e["usage"];
    for (const Json& c : e["choices"]) {
      if (c.contains("delta") && c["delta"].contains("content"))
        s.text += c["delta"]["content"].get<std::string>();
      if (c.contains("text")) s.text += c["text"].get<std::string>();
      if (c.contains("token_ids"))
        for (int32_t id : c["token_ids"]) s.ids.push_back(id);
      if (!c["finish_reason"].is_null()) s.finish_reason = c["finish_reason"];
    }
  }
  return s;
}

TEST(ServeHttp, CompletionAndChatWithUsage) {
  ServerProcess server({});
  ASSERT_TRUE(server.started());
  const Reply c = post(server.port(), "/v1/completions",
                       Json{{"model", "tiny-block"},
                            {"prompt", "123+456="},
                            {"max_tokens", 8},
                            {"return_token_ids", true}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.body["object"], "text_completion");
  EXPECT_EQ(c.body["model"], "tiny-block");
  const Json& choice = c.body["choices"][0];
  EXPECT_TRUE(choice["finish_reason"] == "stop" || choice["finish_reason"] == "length");
  const Reply tok = post(server.port(), "/tokenize", Json{{"prompt", "123+456="}});
  EXPECT_EQ(c.body["usage"]["prompt_tokens"], tok.body["count"]);
  EXPECT_EQ(c.body["usage"]["completion_tokens"], choice["token_ids"].size());
  EXPECT_EQ(c.body["usage"]["total_tokens"],
            c.body["usage"]["prompt_tokens"].get<int>() + choice["token_ids"].size());
  const Reply detok = post(server.port(), "/detokenize", Json{{"tokens", choice["token_ids"]}});
  EXPECT_EQ(detok.body["prompt"], choice["text"]);

  const Reply chat = post(server.port(), "/v1/chat/completions", chat_body("What is 2+3?", 16));
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.body["object"], "chat.completion");
  EXPECT_EQ(chat.body["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(chat.body["choices"][0]["message"]["content"].is_string());
  EXPECT_GT(chat.body["usage"]["completion_tokens"].get<int>(), 0);
}

TEST(ServeHttp, StreamEqualsWholeResponse) {
  ServerProcess server({});
  ASSERT_TRUE(server.started());
  Json body = chat_body("What is 41+17?", 24);
  body["return_token_ids"] = true;
  const Reply whole = post(server.port(), "/v1/chat/completions", body);
  ASSERT_EQ(whole.status, 200);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const auto events = stream(server.port(), "/v1/chat/completions", body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  const Streamed s = collect(events);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(s.text, whole.body["choices"][0]["message"]["content"]);
  EXPECT_EQ(Json(s.ids), whole.body["choices"][0]["token_ids"]);
  EXPECT_EQ(s.finish_reason, whole.body["choices"][0]["finish_reason"]);
  EXPECT_EQ(s.usage, whole.body["usage"]);
  // The usage chunk is the last before [DONE], with no choices.
  EXPECT_TRUE(events[events.size() - 2]["choices"].empty());

  // Provisional chunks: marked, outside choices, and the committed stream is unchanged.
  body["dllm"] = {{"stream_provisional", true}};
  const Streamed p = collect(stream(server.port(), "/v1/chat/completions", body));
  EXPECT_GT(p.provisional, 0);
  EXPECT_EQ(p.text, s.text);
  EXPECT_EQ(p.ids, s.ids);

  // Completions stream too; n = 2 gives two choices (greedy: equal).
  const auto ce = stream(server.port(), "/v1/completions",
                         Json{{"prompt", "7+8="}, {"max_tokens", 8}, {"stream", true}, {"n", 2}});
  std::set<int> indexes;
  for (const Json& e : ce)
    if (e.is_object())
      for (const Json& c : e["choices"]) indexes.insert(c["index"].get<int>());
  EXPECT_EQ(indexes, (std::set<int>{0, 1}));
}

TEST(ServeHttp, StopStringsNeverLeak) {
  ServerProcess server({});
  ASSERT_TRUE(server.started());
  Json body = {{"prompt", "Q: What is 305+196? A:"}, {"max_tokens", 24}, {"ignore_eos", true}};
  const Reply free_run = post(server.port(), "/v1/completions", body);
  const std::string text = free_run.body["choices"][0]["text"];
  ASSERT_GE(text.size(), 4u) << text;
  const std::string stop = text.substr(text.size() / 2, 2);
  const std::string expected = text.substr(0, text.find(stop));
  body["stop"] = {stop};
  const Reply stopped = post(server.port(), "/v1/completions", body);
  EXPECT_EQ(stopped.body["choices"][0]["text"], expected);
  EXPECT_EQ(stopped.body["choices"][0]["finish_reason"], "stop");
  body["stream"] = true;
  const auto events = stream(server.port(), "/v1/completions", body);
  const Streamed s = collect(events);
  EXPECT_EQ(s.text, expected);
  EXPECT_EQ(s.finish_reason, "stop");
  for (const Json& e : events) {
    if (!e.is_object()) continue;
    for (const Json& c : e["choices"]) {
      EXPECT_EQ(c["text"].get<std::string>().find(stop), std::string::npos);
    }
  }
}

TEST(ServeHttp, ErrorPathsAreOpenAiErrorsNamingTheField) {
  ServerProcess server({"--max-prompt-tokens", "16", "--max-body-mib", "0.01"});
  ASSERT_TRUE(server.started());
  const int port = server.port();
  auto expect_error = [&](const Reply& r, int status, const std::string& param) {
    EXPECT_EQ(r.status, status) << r.body;
    ASSERT_TRUE(r.body.contains("error")) << r.body;
    EXPECT_TRUE(r.body["error"]["message"].is_string());
    EXPECT_TRUE(r.body["error"]["type"].is_string());
    if (param.empty()) {
      EXPECT_TRUE(r.body["error"]["param"].is_null()) << r.body;
    } else {
      EXPECT_EQ(r.body["error"]["param"], param) << r.body;
    }
  };
  expect_error(post(port, "/v1/completions", std::string("{\"prompt\": ")), 400, "");
  expect_error(post(port, "/v1/completions", std::string(100, '[') + std::string(100, ']')), 400,
               "");
  expect_error(post(port, "/v1/completions", std::string("[1, 2]")), 400, "");
  expect_error(post(port, "/v1/completions", Json{{"prompt", "x"}, {"max_tokens", "8"}}), 400,
               "max_tokens");
  expect_error(post(port, "/v1/completions", Json{{"prompt", "x"}, {"temperature", -0.5}}), 400,
               "temperature");
  expect_error(post(port, "/v1/completions", Json{{"prompt", "x"}, {"block_length", -3}}), 400,
               "block_length");
  expect_error(post(port, "/v1/completions", Json{{"prompt", "x"}, {"strategy", "nope"}}), 400,
               "strategy");
  expect_error(post(port, "/v1/chat/completions", Json{{"messages", "hi"}}), 400, "messages");
  expect_error(post(port, "/v1/completions", Json{{"prompt", "x"}, {"max_tokens", 8192}}), 400,
               "max_tokens");  // prompt + max_tokens past the context (the engine's check)
  expect_error(post(port, "/v1/completions", Json{{"model", "gpt-4"}, {"prompt", "x"}}), 404,
               "model");
  expect_error(post(port, "/v1/completions",
                    Json{{"prompt",
                          "one two three four five six seven eight nine ten eleven "
                          "twelve thirteen fourteen fifteen sixteen seventeen"}}),
               400, "prompt");
  expect_error(post(port, "/v1/completions", Json{{"prompt", std::string(20000, 'a')}}), 413, "");
  expect_error(post(port, "/v1/nothing", Json::object()), 404, "");
  {  // JSON sent as a form (curl -d without a Content-Type): the 413 says what to send instead
    httplib::Client c("127.0.0.1", port);
    const std::string body = Json{{"prompt", std::string(9000, 'a')}}.dump();
    auto r = c.Post("/v1/completions", body, "application/x-www-form-urlencoded");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    EXPECT_NE(r->body.find("Content-Type: application/json"), std::string::npos) << r->body;
  }
  expect_error(post(port, "/detokenize", Json{{"tokens", {99999}}}), 400, "tokens");
  // Nothing above reached the engine; the server still answers.
  EXPECT_EQ(post(port, "/v1/completions", Json{{"prompt", "1+1="}, {"max_tokens", 4}}).status, 200);
  const std::string m = get(port, "/metrics");
  EXPECT_NE(m.find("dllm_http_responses_total{status=\"400\"}"), std::string::npos) << m;
  EXPECT_NE(m.find("dllm_http_responses_total{status=\"413\"}"), std::string::npos) << m;
}

// "sparse_prefill" per request: a config the server loaded from --sparse-prefill-dir by name, or
// "none"; a pattern keeping every key answers as the dense prefill, one keeping almost nothing
// does not; unknown names and paths are 400s naming the field and the accepted names.
TEST(ServeHttp, SparsePrefillPerRequest) {
  const auto dir = test::temp_dir("serve_sparse_prefill");
  test::write_tiny_block_sparse_config(dir / "keep-all.json", R"(["stream_llm", 0, 100000])");
  test::write_tiny_block_sparse_config(dir / "tiny-band.json", R"(["stream_llm", 1, 2])");
  ServerProcess server({"--sparse-prefill-dir", dir.string()});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  auto answer = [&](const std::optional<std::string>& sparse) {
    Json body = chat_body("What is 123 + 456?", 16);
    body["return_token_ids"] = true;
    if (sparse) body["sparse_prefill"] = *sparse;
    const Reply r = post(port, "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.body["choices"][0]["token_ids"];
  };
  const Json dense = answer(std::nullopt);
  EXPECT_EQ(answer("keep-all"), dense);
  EXPECT_EQ(answer("none"), dense);
  EXPECT_NE(answer("tiny-band"), dense)
      << "a prefill seeing two keys per row must answer otherwise";
  for (const Json& bad :
       {Json("nope"), Json("../keep-all"), Json(dir / "keep-all.json"), Json(3)}) {
    Json body = chat_body("What is 123 + 456?", 4);
    body["sparse_prefill"] = bad;
    const Reply r = post(port, "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(r.body["error"]["param"], "sparse_prefill") << r.body;
    if (bad.is_string())
      EXPECT_NE(
          r.body["error"]["message"].get<std::string>().find("accepted: keep-all, none, tiny-band"),
          std::string::npos)
          << r.body;
  }
}

TEST(ServeHttp, ApiKey) {
  ServerProcess server({"--api-key", "sekrit"});
  ASSERT_TRUE(server.started());
  const Json body = {{"prompt", "1+1="}, {"max_tokens", 4}};
  EXPECT_EQ(post(server.port(), "/v1/completions", body.dump()).status, 401);
  const Reply wrong =
      post(server.port(), "/v1/completions", body.dump(), {{"Authorization", "Bearer sekrix"}});
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.body["error"]["type"], "authentication_error");
  EXPECT_EQ(
      post(server.port(), "/v1/completions", body.dump(), {{"Authorization", "Bearer sekrit"}})
          .status,
      200);
  int status = 0;
  get(server.port(), "/health", &status);
  EXPECT_EQ(status, 200);  // probes need no key
  get(server.port(), "/v1/models", &status);
  EXPECT_EQ(status, 401);
}

// A request that runs long enough to be interrupted: block diffusion to 4000 tokens.
Json long_request() {
  return {{"prompt", "Count:"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}};
}

TEST(ServeHttp, DisconnectMidStreamCancelsTheRequest) {
  ServerProcess server({});
  ASSERT_TRUE(server.started());
  int chunks = 0;
  stream(server.port(), "/v1/completions", long_request(), [&](const Json& e) {
    return ++chunks < 3;  // hang up after a few committed blocks
  });
  EXPECT_EQ(chunks, 3);
  for (int i = 0; i < 200 && metric(server.port(), "dllm_engine_requests_cancelled_total") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(metric(server.port(), "dllm_engine_requests_cancelled_total"), 1);
  EXPECT_EQ(metric(server.port(), "dllm_client_disconnects_total"), 1);
  EXPECT_EQ(metric(server.port(), "dllm_server_requests_in_flight"), 0);
  EXPECT_EQ(metric(server.port(), "dllm_num_requests_running"), 0);
  EXPECT_LT(metric(server.port(), "dllm_generation_tokens_total"), 4000);
}

TEST(ServeHttp, DisconnectWhileWaitingForAWholeResponseCancelsTheRequest) {
  ServerProcess server({});
  ASSERT_TRUE(server.started());
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(0, 300000);  // gives up (closes the connection) after 0.3 s
  Json body = long_request();
  body["stream"] = false;
  const auto r = c.Post("/v1/completions", body.dump(), "application/json");
  EXPECT_FALSE(r);  // timed out
  for (int i = 0; i < 200 && metric(server.port(), "dllm_engine_requests_cancelled_total") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(metric(server.port(), "dllm_engine_requests_cancelled_total"), 1);
  EXPECT_EQ(metric(server.port(), "dllm_client_disconnects_total"), 1);
  EXPECT_EQ(metric(server.port(), "dllm_server_requests_in_flight"), 0);
}

TEST(ServeHttp, FullQueueAnswers429WithRetryAfter) {
  ServerProcess server({"--max-running", "1", "--max-queued", "0"});
  ASSERT_TRUE(server.started());
  std::atomic<bool> first_chunk{false}, hang_up{false};
  std::thread holder([&] {
    stream(server.port(), "/v1/completions", long_request(), [&](const Json&) {
      first_chunk = true;
      return !hang_up;
    });
  });
  while (!first_chunk) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const Reply r = post(server.port(), "/v1/completions", Json{{"prompt", "x"}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.retry_after, "1");
  EXPECT_EQ(r.body["error"]["type"], "rate_limit_error");
  hang_up = true;
  holder.join();
  for (int i = 0; i < 200 && metric(server.port(), "dllm_server_requests_in_flight") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(post(server.port(), "/v1/completions", Json{{"prompt", "x"}, {"max_tokens", 2}}).status,
            200);
}

// 64 clients at once, mixed strategies, endpoints and streaming; each result must equal the same
// request run alone through `dllm generate` (greedy, seeded; the CPU forward is batch-invariant).
TEST(ServeHttp, ConcurrentClientsEqualGenerateAlone) {
  ServerProcess server({});
  ASSERT_TRUE(server.started());
  const std::vector<std::string> strategies = {"block", "ar", "s2d2"};
  constexpr int kClients = 64;
  std::vector<Json> lines(kClients);
  std::vector<Streamed> got(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    const std::string question =
        "What is " + std::to_string(100 + 7 * i) + "+" + std::to_string(300 + 11 * i) + "?";
    const bool chat = i % 2 == 0, streamed = (i / 2) % 2 == 0;
    // A seed keys the random stream (S2D2's acceptance draws) by the request, not by its engine
    // id, which differs between the server and the run alone.
    Json body = {{"max_tokens", 12 + i % 5},
                 {"strategy", strategies[i % 3]},
                 {"seed", 1000 + i},
                 {"return_token_ids", true}};
    Json line = body;
    line.erase("return_token_ids");
    if (chat) {
      body["messages"] = line["messages"] = {{{"role", "user"}, {"content", question}}};
    } else {
      body["prompt"] = line["prompt"] = question + " A:";
    }
    if (i % 3 == 0 && i % 4 == 0) body["block_length"] = line["block_length"] = 8;
    lines[i] = line;
    body["stream"] = streamed;
    clients.emplace_back([&, i, body, chat, streamed] {
      const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
      if (streamed) {
        got[i] = collect(stream(server.port(), path, body));
        return;
      }
      const Reply r = post(server.port(), path, body);
      ASSERT_EQ(r.status, 200) << r.body;
      const Json& c = r.body["choices"][0];
      got[i].text = chat ? c["message"]["content"] : c["text"];
      got[i].ids = c["token_ids"].get<std::vector<int32_t>>();
      got[i].finish_reason = c["finish_reason"];
    });
  }
  for (auto& t : clients) t.join();

  const auto dir = test::temp_dir("serve-alone");
  {
    std::ofstream f(dir / "requests.jsonl");
    for (const Json& l : lines) f << l.dump() << "\n";
  }
  const auto run =
      test::run_command(test::dllm_binary() + " generate --requests " +
                        (dir / "requests.jsonl").string() + " --concurrency 1 2>/dev/null");
  ASSERT_EQ(run.status, 0) << run.output;
  std::istringstream out(run.output);
  std::string line;
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(std::getline(out, line));
    const Json alone = Json::parse(line);
    EXPECT_EQ(Json(got[i].ids), alone["ids"]) << "client " << i << " " << lines[i];
    EXPECT_EQ(got[i].text, alone["text"]) << "client " << i;
    EXPECT_EQ(got[i].finish_reason, alone["finish_reason"]) << "client " << i;
  }
}

TEST(ServeHttp, SigtermDrainsAndCancelsAfterTheGracePeriod) {
  ServerProcess server({"--shutdown-grace", "0.5"});
  ASSERT_TRUE(server.started());
  std::atomic<bool> first_chunk{false};
  std::vector<Json> events;
  std::thread client([&] {
    events = stream(server.port(), "/v1/completions", long_request(), [&](const Json&) {
      first_chunk = true;
      return true;
    });
  });
  while (!first_chunk) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server.terminate(30), 0) << server.log();
  client.join();
  const Streamed s = collect(events);
  EXPECT_EQ(s.finish_reason, "abort");
  EXPECT_TRUE(s.done);
}

TEST(ServeHttp, ModelsHealthMetrics) {
  ServerProcess server({});
  ASSERT_TRUE(server.started());
  const Json models = Json::parse(get(server.port(), "/v1/models"));
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny-block");
  EXPECT_EQ(models["data"][0]["max_model_len"], 8192);
  int status = 0;
  EXPECT_EQ(Json::parse(get(server.port(), "/health", &status))["status"], "ok");
  EXPECT_EQ(status, 200);
  post(server.port(), "/v1/completions", Json{{"prompt", "1+1="}, {"max_tokens", 8}});
  const std::string m = get(server.port(), "/metrics");
  for (const char* name :
       {"# TYPE dllm_time_to_first_token_seconds histogram",
        "# TYPE dllm_inter_block_latency_seconds histogram",
        "# TYPE dllm_e2e_request_latency_seconds histogram",
        "dllm_e2e_request_latency_seconds_count 1", "dllm_kv_cache_usage_ratio",
        "dllm_forwards_total", "dllm_tokens_per_forward", "dllm_num_requests_waiting",
        "dllm_http_responses_total{status=\"200\"}", "dllm_request_finished_total{finish_reason="})
    EXPECT_NE(m.find(name), std::string::npos) << name << "\n" << m;
  EXPECT_GT(metric(server.port(), "dllm_generation_tokens_total"), 0);
}

}  // namespace
}  // namespace dllm
