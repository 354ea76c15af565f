// The public API (include/dllm/engine.h) as its users see it: streamed text adds up to the
// result, requests from many threads at once, cancellation, errors that name the parameter.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "dllm/engine.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

EngineConfig tiny_block() {
  EngineConfig c;
  c.model = (test::models_dir() / "tiny-block").string();
  c.device = "cpu";
  return c;
}

Request question(const std::string& q, int32_t max_tokens = 16) {
  Request r;
  r.messages_json = R"([{"role": "user", "content": ")" + q + R"("}])";
  r.max_tokens = max_tokens;
  return r;
}

TEST(EngineApi, StreamedTextAddsUpToTheResult) {
  Engine engine(tiny_block());
  std::string streamed;
  std::vector<int32_t> ids;
  int finished = 0;
  const RequestResult r =
      engine.generate(question("What is 123 + 456?"), [&](const RequestOutput& o) {
        streamed += o.text;
        ids.insert(ids.end(), o.token_ids.begin(), o.token_ids.end());
        finished += o.finished;
      });
  EXPECT_EQ(finished, 1);
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(ids, r.token_ids);
  EXPECT_EQ(r.text, "579");
  EXPECT_EQ(r.strategy, "block");
  EXPECT_EQ(r.stats.generated_tokens, static_cast<int64_t>(r.token_ids.size()));
  EXPECT_GT(r.stats.forwards, 0);
  EXPECT_GE(r.stats.first_token_seconds, 0);
  EXPECT_EQ(engine.stats().finished, 1);
}

// A waiter woken by its result reads statistics that already count the request as finished and
// no longer as running (the sequence leaves the running list before it reports).
TEST(EngineApi, StatsAfterWaitCountNothingRunning) {
  Engine engine(tiny_block());
  for (int i = 0; i < 5; ++i) {
    engine.generate(question("What is 1" + std::to_string(i) + " + 2?", 8));
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.running, 0) << "after request " << i;
    EXPECT_EQ(s.waiting, 0) << "after request " << i;
    EXPECT_EQ(s.finished, i + 1);
  }
}

TEST(EngineApi, ManyThreadsSubmitAtOnce) {
  Engine engine(tiny_block());
  const RequestResult alone = engine.generate(question("What is 602 + 416?"));
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<RequestResult> results;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int k = 0; k < 3; ++k) {
        RequestResult r = engine.generate(question("What is 602 + 416?"));
        std::lock_guard lk(mu);
        results.push_back(std::move(r));
      }
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(results.size(), 24u);
  for (const auto& r : results) EXPECT_EQ(r.token_ids, alone.token_ids);
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.finished, 25);
  EXPECT_GT(s.sequences_per_step, 1.0) << "concurrent requests share forwards";
  EXPECT_EQ(s.kv_pages_used, 0);
}

TEST(EngineApi, CancelEndsARequestAndFreesItsMemory) {
  Engine engine(tiny_block());
  Request r = question("What is 1 + 1?", 200);
  r.ignore_eos = true;  // it would run for 200 tokens
  std::atomic<int> outputs{0};
  const uint64_t id = engine.submit(r, [&](const RequestOutput&) { ++outputs; });
  while (outputs == 0) std::this_thread::yield();
  EXPECT_TRUE(engine.cancel(id));
  const RequestResult res = engine.wait(id);
  EXPECT_EQ(res.finish_reason, "cancelled");
  EXPECT_LT(res.token_ids.size(), 200u);
  EXPECT_FALSE(engine.cancel(id)) << "finished";
  EXPECT_THROW(engine.wait(id), Error) << "results are handed out once";
  EXPECT_EQ(engine.stats().cancelled, 1);
  EXPECT_EQ(engine.stats().kv_pages_used, 0);
}

TEST(EngineApi, InvalidRequestsNameTheParameter) {
  Engine engine(tiny_block());
  auto error_of = [&](const Request& r) -> std::string {
    try {
      engine.submit(r);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  Request r = question("hi");
  r.temperature = -1;
  EXPECT_NE(error_of(r).find("--temperature must be >= 0"), std::string::npos);
  r = question("hi");
  r.temperature = 1e-30f;
  EXPECT_NE(error_of(r).find("--temperature must be 0 (greedy) or at least"), std::string::npos);
  r = question("hi");
  r.options["threshold"] = "-0.5";
  EXPECT_NE(error_of(r).find("--threshold must be in [0, 1]"), std::string::npos);
  r = question("hi");
  r.options["block_length"] = "abc";
  EXPECT_NE(error_of(r).find("--block-length must be a whole number"), std::string::npos);
  r = question("hi");
  r.options["no_such_knob"] = "1";
  EXPECT_NE(error_of(r).find("unknown decoding option 'no_such_knob'"), std::string::npos);
  r = question("hi");
  r.options["verify_policy"] = "score";
  EXPECT_NE(error_of(r).find("applies to --strategy s2d2 only"), std::string::npos);
  r = question("hi");
  r.max_tokens = 100000;
  EXPECT_NE(error_of(r).find("exceeds the model's context"), std::string::npos);
  Request empty;
  EXPECT_NE(error_of(empty).find("the prompt is empty"), std::string::npos);
  r = question("hi");
  r.prompt = "also text";
  EXPECT_NE(error_of(r).find("give the prompt one way"), std::string::npos);
  r = Request{};
  r.messages_json = "[{";
  EXPECT_NE(error_of(r).find("not valid JSON"), std::string::npos);
  // The engine is still fine.
  EXPECT_EQ(engine.generate(question("What is 123 + 456?")).text, "579");
}

// LLaDA2.x per request, as the server and the Python package pass it (strategy + option map):
// S2D2 and MAGE run and report; what does not combine is an error naming the option.
TEST(EngineApi, Llada2S2d2AndMagePerRequest) {
  EngineConfig c;
  c.model = test::model_fixture("llada2-tiny").string();
  c.device = "cpu";
  Engine engine(c);
  Request r;
  for (int i = 0; i < 40; ++i) r.prompt_ids.push_back((i * 37 + 5) % 289);
  r.max_tokens = 12;
  r.ignore_eos = true;
  Request s2d2 = r;
  s2d2.strategy = "s2d2";
  const RequestResult a = engine.generate(s2d2);
  EXPECT_EQ(a.strategy, "s2d2");
  EXPECT_EQ(a.token_ids.size(), 12u);
  EXPECT_GT(a.stats.verify_calls, 0);
  Request s2d2_edit = s2d2;  // S2D2 over LLaDA2.1 token editing
  s2d2_edit.options["edit_mode"] = "q";
  const RequestResult e = engine.generate(s2d2_edit);
  EXPECT_EQ(e.token_ids.size(), 12u);
  EXPECT_GT(e.stats.verify_calls, 0);
  Request mage = r;
  mage.options["sparse"] = "mage";
  mage.options["sparse_k"] = "8";
  mage.options["block_length"] = "8";
  EXPECT_EQ(engine.generate(mage).token_ids.size(), 12u);
  mage.strategy = "edit";
  EXPECT_EQ(engine.generate(mage).token_ids.size(), 12u);
  auto error_of = [&](const Request& q) -> std::string {
    try {
      engine.submit(q);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  Request bad = mage;
  bad.options["sparse"] = "sparsed";
  EXPECT_NE(error_of(bad).find("--sparse sparsed needs a fixed number of steps"),
            std::string::npos);
  bad = s2d2;
  bad.options["sparse"] = "mage";
  EXPECT_NE(error_of(bad).find("--sparse mage applies to --strategy block"), std::string::npos);
  bad = s2d2;
  bad.options["editing_threshold"] = "0.5";
  EXPECT_NE(error_of(bad).find("--editing-threshold and --max-post-steps apply to --strategy s2d2 "
                               "only with --edit-mode"),
            std::string::npos);
  bad = s2d2_edit;
  bad.options["steps"] = "4";
  EXPECT_NE(error_of(bad).find("--steps does not apply to --strategy s2d2 with --edit-mode"),
            std::string::npos);
}

TEST(EngineApi, ConfigErrorsNameTheSetting) {
  EngineConfig c = tiny_block();
  c.kv_page_size = 12;
  EXPECT_THROW(Engine{c}, Error);
  c = tiny_block();
  c.model = "/nonexistent/model";
  EXPECT_THROW(Engine{c}, Error);
  c = tiny_block();
  c.max_running = 0;
  EXPECT_THROW(Engine{c}, Error);
}

}  // namespace
}  // namespace dllm
