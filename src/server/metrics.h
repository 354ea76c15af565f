// GET /metrics in Prometheus' text format (version 0.0.4): the engine's counters and gauges
// (EngineStats) next to what only the server sees — HTTP responses by status, requests by
// finish reason, client disconnects, and latency histograms per engine request:
//   dllm_time_to_first_token_seconds   submit -> first committed block streamed
//   dllm_inter_block_latency_seconds   between two committed blocks of one request
//   dllm_e2e_request_latency_seconds   submit -> finished
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dllm/engine.h"

namespace dllm::server {

// Cumulative histogram with fixed upper bounds (+Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double x);
  // "# HELP", "# TYPE", the _bucket lines, _sum and _count.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // Thread-safe; called from HTTP threads and the engine's callback thread.
  void http_response(int status);
  void request_finished(const std::string& finish_reason);
  void client_disconnected();
  void time_to_first_token(double seconds);
  void inter_block(double seconds);
  void end_to_end(double seconds);

  std::string render(const EngineStats& engine, int64_t in_flight) const;

 private:
  mutable std::mutex mu_;
  std::map<int, int64_t> responses_;         // HTTP status -> count
  std::map<std::string, int64_t> finished_;  // finish reason -> count
  int64_t disconnects_ = 0;
  Histogram ttft_, inter_block_, e2e_;
};

}  // namespace dllm::server
