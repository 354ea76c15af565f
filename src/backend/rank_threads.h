// RankThreads: one thread per tensor-parallel rank, kept for the group's life. Every call that
// touches a rank's device — building its backend, allocating its KV storage, forwards, freeing —
// runs on that rank's thread, which keeps the rank's GPU current; the ranks of one forward run at
// once, so their all-reduces meet.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dllm {

class RankThreads {
 public:
  explicit RankThreads(int world);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int world() const { return static_cast<int>(threads_.size()); }
  // Runs job(rank) on every rank's thread at once and returns when all are done. When a rank
  // throws, on_failure() runs at once (to release the ranks waiting for it in a collective) and
  // the first exception is rethrown here once every rank has returned.
  void run_all(const std::function<void(int)>& job, const std::function<void()>& on_failure = {});
  // Runs job() on one rank's thread; its exception is rethrown here.
  void run_on(int rank, const std::function<void()>& job);

 private:
  void serve(int rank);
  void dispatch(const std::function<void(int)>& job, int only_rank,
                const std::function<void()>& on_failure);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable work_, done_;
  const std::function<void(int)>* job_ = nullptr;
  const std::function<void()>* on_failure_ = nullptr;
  int only_rank_ = -1;  // -1: every rank
  int64_t generation_ = 0;
  int pending_ = 0;
  std::exception_ptr first_error_;
  bool stopping_ = false;
};

}  // namespace dllm
