// One HTTP request's engine requests (prompts x n choices) while they run: submits them, turns
// the engine's callbacks (on the engine thread) into a queue the HTTP thread reads, times them
// for the latency histograms, and cancels whatever is unfinished when the client goes away.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "dllm/engine.h"
#include "server/admission.h"
#include "server/metrics.h"

namespace dllm::server {

class GenerationGroup {
 public:
  struct Event {
    int choice = 0;
    RequestOutput output;
  };

  GenerationGroup(Engine& engine, Admission& admission, ServerMetrics& metrics);
  // Cancels what is unfinished and collects every result from the engine; runs on the HTTP
  // thread (never on the engine's, which it waits for).
  ~GenerationGroup();
  GenerationGroup(const GenerationGroup&) = delete;
  GenerationGroup& operator=(const GenerationGroup&) = delete;

  // Submits one engine request per choice (the caller reserved them with the Admission).
  // On an invalid request: cancels those already submitted, releases the rest of the
  // reservation and rethrows the engine's dllm::Error.
  void submit(const std::vector<Request>& choices);

  // The next event, waiting at most `timeout`; nullopt on timeout.
  std::optional<Event> next(std::chrono::milliseconds timeout);
  bool all_finished() const;
  // Collects a finished choice's result (RequestResult: ids, stats) from the engine.
  RequestResult result(int choice);
  // Client gone or handler failed: cancel every unfinished choice.
  void cancel();
  size_t size() const { return ids_.size(); }

 private:
  // What the engine's callbacks share with the HTTP thread; owned by both, so a callback that
  // outlives the group (a cancelled request's last event) still has somewhere to write.
  struct Channel {
    struct Timing {
      std::chrono::steady_clock::time_point submitted, last_block;
      bool first = true;
    };
    explicit Channel(ServerMetrics& m) : metrics(m) {}
    void on_output(int choice, const RequestOutput& o);
    ServerMetrics& metrics;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Event> events;
    std::vector<Timing> timing;
    size_t finished = 0;
  };

  Engine& engine_;
  Admission& admission_;
  std::shared_ptr<Channel> channel_;
  std::vector<uint64_t> ids_;  // HTTP thread only
  std::vector<bool> waited_;
};

}  // namespace dllm::server
