// The server's own bookkeeping without HTTP: Prometheus histograms and the admission bound.
#include <gtest/gtest.h>

#include "server/admission.h"
#include "server/metrics.h"

namespace dllm::server {
namespace {

TEST(ServeMetrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  for (double x : {0.05, 0.1, 0.5, 2.0, 3.0}) h.observe(x);
  const std::string text = h.render("t_seconds", "help");
  EXPECT_NE(text.find("# TYPE t_seconds histogram\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"0.1\"} 2\n"), std::string::npos)
      << text;  // 0.1 itself falls in the le=0.1 bucket
  EXPECT_NE(text.find("t_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"+Inf\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_sum 5.65\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_count 5\n"), std::string::npos) << text;
}

TEST(ServeMetrics, RenderHasEngineGaugesAndServerCounters) {
  ServerMetrics m;
  m.http_response(200);
  m.http_response(429);
  m.http_response(429);
  m.request_finished("stop");
  EngineStats e;
  e.waiting = 3;
  e.kv_pages = 10;
  e.kv_pages_used = 4;
  e.steps = 4;
  e.committed_tokens = 10;
  const std::string text = m.render(e, 7);
  for (const char* line : {"dllm_num_requests_waiting 3\n", "dllm_kv_cache_usage_ratio 0.4\n",
                           "dllm_tokens_per_forward 2.5\n", "dllm_server_requests_in_flight 7\n",
                           "dllm_http_responses_total{status=\"429\"} 2\n",
                           "dllm_request_finished_total{finish_reason=\"stop\"} 1\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
}

TEST(ServeAdmission, BoundsRequestsInFlight) {
  Admission a(3);
  EXPECT_EQ(a.try_admit(2), Admission::Verdict::admitted);
  EXPECT_EQ(a.try_admit(2), Admission::Verdict::full);
  EXPECT_EQ(a.try_admit(1), Admission::Verdict::admitted);
  EXPECT_EQ(a.in_flight(), 3);
  a.submitted(10);
  a.finished(10);
  a.finished(11);  // finished before submitted() recorded it
  a.submitted(11);
  EXPECT_EQ(a.in_flight(), 1);
  a.release(1);  // a reservation that was never submitted
  EXPECT_EQ(a.in_flight(), 0);
  EXPECT_EQ(a.try_admit(3), Admission::Verdict::admitted);
}

}  // namespace
}  // namespace dllm::server
