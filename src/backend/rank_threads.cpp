#include "backend/rank_threads.h"

#include <utility>

namespace dllm {

RankThreads::RankThreads(int world) {
  for (int r = 0; r < world; ++r) threads_.emplace_back([this, r] { serve(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run_all(const std::function<void(int)>& job,
                          const std::function<void()>& on_failure) {
  dispatch(job, -1, on_failure);
}

void RankThreads::run_on(int rank, const std::function<void()>& job) {
  const std::function<void(int)> one = [&job](int) { job(); };
  dispatch(one, rank, {});
}

void RankThreads::dispatch(const std::function<void(int)>& job, int only_rank,
                           const std::function<void()>& on_failure) {
  std::unique_lock lock(mutex_);
  job_ = &job;
  on_failure_ = on_failure ? &on_failure : nullptr;
  only_rank_ = only_rank;
  pending_ = only_rank < 0 ? world() : 1;
  first_error_ = nullptr;
  ++generation_;
  work_.notify_all();
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  on_failure_ = nullptr;
  if (first_error_) std::rethrow_exception(std::exchange(first_error_, nullptr));
}

void RankThreads::serve(int rank) {
  int64_t seen = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    if (only_rank_ >= 0 && only_rank_ != rank) continue;
    const std::function<void(int)>* job = job_;
    const std::function<void()>* on_failure = on_failure_;
    lock.unlock();
    try {
      (*job)(rank);
    } catch (...) {
      // The first failure is the cause (the ranks it releases fail after it, as aborted).
      lock.lock();
      const bool first = !first_error_;
      if (first) first_error_ = std::current_exception();
      lock.unlock();
      if (first && on_failure) (*on_failure)();
    }
    lock.lock();
    if (--pending_ == 0) done_.notify_all();
  }
}

}  // namespace dllm
