// Admission control and the set of engine requests in flight: a request (all its choices) is
// admitted while the server holds fewer than `capacity` unfinished engine requests (the engine's
// --max-running plus --max-queued), otherwise it gets 429 with Retry-After. Shutdown drains:
// no more admissions, then the requests left are cancelled.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>

#include "dllm/engine.h"

namespace dllm::server {

class Admission {
 public:
  explicit Admission(int64_t capacity) : capacity_(capacity) {}

  enum class Verdict { admitted, full, draining };
  // Reserves `n` engine requests.
  Verdict try_admit(int64_t n);
  // Gives back reservations that were not submitted (a request that failed validation).
  void release(int64_t n);
  // A reserved request was submitted under `id` / has finished (releases its reservation).
  void submitted(uint64_t id);
  void finished(uint64_t id);

  int64_t in_flight() const;
  // Shutdown: refuse new requests; wait until none is in flight or the deadline passes; then
  // cancel what is left and wait for it to end (at the engine's next step).
  void drain(Engine& engine, std::chrono::steady_clock::time_point deadline);
  bool draining() const;

 private:
  const int64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  int64_t reserved_ = 0;            // admitted, not finished (submitted or about to be)
  std::set<uint64_t> running_;      // submitted engine ids not finished
  std::set<uint64_t> ended_early_;  // finished before submitted() recorded them
  bool draining_ = false;
};

}  // namespace dllm::server
