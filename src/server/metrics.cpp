#include "server/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <limits>

namespace dllm::server {

namespace {

// The shortest of %.15g .. %.17g that reads back as x ("0.1", not "0.10000000000000001").
std::string number(double x) {
  char buf[64];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

void metric(std::string& out, const char* name, const char* type, const char* help, double v) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
         name + " " + number(v) + "\n";
}

// Latency buckets from 1 ms to 5 min: CPU runs of the embedded model and GPU runs alike.
std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1,     2.5,    5,     10,   20,    40,   80,  160,  300};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double x) {
  size_t i = 0;
  while (i < bounds_.size() && x > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += x;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
  return out;
}

ServerMetrics::ServerMetrics()
    : ttft_(latency_bounds()), inter_block_(latency_bounds()), e2e_(latency_bounds()) {}

void ServerMetrics::http_response(int status) {
  std::lock_guard lk(mu_);
  ++responses_[status];
}
void ServerMetrics::request_finished(const std::string& reason) {
  std::lock_guard lk(mu_);
  ++finished_[reason];
}
void ServerMetrics::client_disconnected() {
  std::lock_guard lk(mu_);
  ++disconnects_;
}
void ServerMetrics::time_to_first_token(double s) {
  std::lock_guard lk(mu_);
  ttft_.observe(s);
}
void ServerMetrics::inter_block(double s) {
  std::lock_guard lk(mu_);
  inter_block_.observe(s);
}
void ServerMetrics::end_to_end(double s) {
  std::lock_guard lk(mu_);
  e2e_.observe(s);
}

std::string ServerMetrics::render(const EngineStats& e, int64_t in_flight) const {
  std::string out;
  metric(out, "dllm_num_requests_waiting", "gauge", "Engine requests waiting to be scheduled.",
         double(e.waiting));
  metric(out, "dllm_num_requests_running", "gauge", "Engine requests (sequences) running.",
         double(e.running));
  metric(out, "dllm_server_requests_in_flight", "gauge",
         "Engine requests the server admitted that have not finished.", double(in_flight));
  metric(out, "dllm_kv_cache_usage_ratio", "gauge", "Share of KV pool pages in use.",
         e.kv_pages ? double(e.kv_pages_used) / double(e.kv_pages) : 0.0);
  metric(out, "dllm_kv_cache_pages_used", "gauge", "KV pool pages in use.",
         double(e.kv_pages_used));
  metric(out, "dllm_kv_cache_pages_total", "gauge", "KV pool pages.", double(e.kv_pages));
  metric(out, "dllm_kv_cache_page_size", "gauge", "Token slots per KV page.",
         double(e.kv_page_size));
  metric(out, "dllm_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         double(e.prompt_tokens));
  metric(out, "dllm_prefix_cached_tokens_total", "counter",
         "Prompt tokens reused from the prefix cache.", double(e.prefix_cached_tokens));
  metric(out, "dllm_generation_tokens_total", "counter", "Tokens committed (streamed) to requests.",
         double(e.committed_tokens));
  metric(out, "dllm_forwards_total", "counter", "Model forwards (engine steps) run.",
         double(e.steps));
  metric(out, "dllm_query_rows_total", "counter", "Query rows forwarded.", double(e.rows));
  metric(out, "dllm_tokens_per_forward", "gauge", "Committed tokens per forward since start.",
         e.steps ? double(e.committed_tokens) / double(e.steps) : 0.0);
  metric(out, "dllm_sequences_per_forward", "gauge", "Mean sequences sharing a forward.",
         e.sequences_per_step);
  metric(out, "dllm_engine_requests_finished_total", "counter",
         "Engine requests that ended normally.", double(e.finished));
  metric(out, "dllm_engine_requests_cancelled_total", "counter", "Engine requests cancelled.",
         double(e.cancelled));
  metric(out, "dllm_engine_requests_errors_total", "counter", "Engine requests ended by an error.",
         double(e.errors));
  metric(out, "dllm_preemptions_total", "counter", "Sequences preempted for KV pages.",
         double(e.preemptions));
  metric(out, "dllm_forward_seconds_total", "counter", "Time in model forwards.",
         e.forward_seconds);
  metric(out, "dllm_schedule_seconds_total", "counter",
         "Host time scheduling and processing outputs.", e.schedule_seconds);

  std::lock_guard lk(mu_);
  out +=
      "# HELP dllm_http_responses_total HTTP responses by status code.\n"
      "# TYPE dllm_http_responses_total counter\n";
  for (const auto& [status, n] : responses_)
    out += "dllm_http_responses_total{status=\"" + std::to_string(status) + "\"} " +
           std::to_string(n) + "\n";
  out +=
      "# HELP dllm_request_finished_total Engine requests of the server by finish reason.\n"
      "# TYPE dllm_request_finished_total counter\n";
  for (const auto& [reason, n] : finished_)
    out +=
        "dllm_request_finished_total{finish_reason=\"" + reason + "\"} " + std::to_string(n) + "\n";
  metric(out, "dllm_client_disconnects_total", "counter",
         "Clients that went away before their response ended (their requests were cancelled).",
         double(disconnects_));
  out += ttft_.render("dllm_time_to_first_token_seconds",
                      "Submit to the first committed block streamed.");
  out += inter_block_.render("dllm_inter_block_latency_seconds",
                             "Time between two committed blocks of a request.");
  out += e2e_.render("dllm_e2e_request_latency_seconds", "Submit to finished.");
  return out;
}

}  // namespace dllm::server
