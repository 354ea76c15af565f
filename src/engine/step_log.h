#pragma once
// One line per engine step, for finding where a server's time goes (gaps between steps, arrivals,
// step composition): set DLLM_STEP_LOG=FILE. Columns (tab-separated, header first):
//   t_s         seconds since the log opened, at the step's start
//   schedule_ms forward_ms post_ms   the step's three phases
//   sequences rows committed         what the step ran and streamed
//   waiting running                  queue lengths after the step
// Off (no file, no cost beyond a null check) when the variable is unset.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>

namespace dllm {

struct StepRecord {
  std::chrono::steady_clock::time_point start;
  double schedule_ms = 0, forward_ms = 0, post_ms = 0;
  int64_t sequences = 0, rows = 0, committed = 0;
  int64_t waiting = 0, running = 0;
};

class StepLog {
 public:
  // Opens the file named by DLLM_STEP_LOG, if set; a file that cannot be opened is an error.
  static std::unique_ptr<StepLog> from_environment();
  ~StepLog();
  void write(const StepRecord& r);

 private:
  explicit StepLog(std::FILE* f);
  std::FILE* file_;
  std::chrono::steady_clock::time_point opened_;
};

}  // namespace dllm
