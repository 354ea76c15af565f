#include "engine/step_log.h"

#include <cstdlib>

#include "core/error.h"

namespace dllm {

std::unique_ptr<StepLog> StepLog::from_environment() {
  const char* path = std::getenv("DLLM_STEP_LOG");
  if (!path || !*path) return nullptr;
  std::FILE* f = std::fopen(path, "w");
  if (!f) fail("DLLM_STEP_LOG: cannot open '", path, "' for writing");
  std::fputs("t_s\tschedule_ms\tforward_ms\tpost_ms\tsequences\trows\tcommitted\twaiting\trunning\n",
             f);
  return std::unique_ptr<StepLog>(new StepLog(f));
}

StepLog::StepLog(std::FILE* f) : file_(f), opened_(std::chrono::steady_clock::now()) {}

StepLog::~StepLog() {
  std::fclose(file_);
}

void StepLog::write(const StepRecord& r) {
  const double t = std::chrono::duration<double>(r.start - opened_).count();
  std::fprintf(file_, "%.6f\t%.3f\t%.3f\t%.3f\t%lld\t%lld\t%lld\t%lld\t%lld\n", t, r.schedule_ms,
               r.forward_ms, r.post_ms, static_cast<long long>(r.sequences),
               static_cast<long long>(r.rows), static_cast<long long>(r.committed),
               static_cast<long long>(r.waiting), static_cast<long long>(r.running));
  std::fflush(file_);  // a server is usually stopped by a signal: keep every line
}

}  // namespace dllm
