// A sum over the threads of one process, one thread per tensor-parallel rank: the CPU backend's
// all-reduce (the CUDA backend's is NCCL, nccl_group.h). Every rank gets the same bits: rank 0
// adds the parts in rank order. abort() releases every waiting rank with an Error, so a rank that
// failed never leaves the others blocked.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace dllm::cpu_backend {

class ThreadAllReduce {
 public:
  explicit ThreadAllReduce(int world) : world_(world), parts_(static_cast<size_t>(world)) {}

  // Called by every rank with its [count] partial sums; returns with the group's sum in `data`.
  void operator()(int rank, float* data, int64_t count) {
    std::unique_lock lock(mutex_);
    parts_[static_cast<size_t>(rank)] = data;
    barrier(lock);  // every part posted
    if (rank == 0) {
      sum_.assign(data, data + count);
      for (int r = 1; r < world_; ++r)
        for (int64_t i = 0; i < count; ++i) sum_[static_cast<size_t>(i)] += parts_[r][i];
    }
    barrier(lock);  // the sum is ready
    std::copy(sum_.begin(), sum_.end(), data);
    barrier(lock);  // every rank has copied it (rank 0 may start the next sum)
  }

  // Ends every current and later sum with an Error (a rank failed; the group is unusable).
  void abort() {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    changed_.notify_all();
  }

 private:
  void barrier(std::unique_lock<std::mutex>& lock) {
    if (aborted_) fail("the tensor-parallel group was aborted after a rank failed");
    const int64_t generation = generation_;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return generation_ != generation || aborted_; });
      if (aborted_) fail("the tensor-parallel group was aborted after a rank failed");
    }
  }

  const int world_;
  std::vector<float*> parts_;
  std::vector<float> sum_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
};

}  // namespace dllm::cpu_backend
