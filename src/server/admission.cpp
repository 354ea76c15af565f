#include "server/admission.h"

#include <vector>

namespace dllm::server {

Admission::Verdict Admission::try_admit(int64_t n) {
  std::lock_guard lk(mu_);
  if (draining_) return Verdict::draining;
  if (reserved_ + n > capacity_) return Verdict::full;
  reserved_ += n;
  return Verdict::admitted;
}

void Admission::release(int64_t n) {
  std::lock_guard lk(mu_);
  reserved_ -= n;
  if (reserved_ == 0) idle_.notify_all();
}

void Admission::submitted(uint64_t id) {
  std::lock_guard lk(mu_);
  if (!ended_early_.erase(id)) running_.insert(id);
}

void Admission::finished(uint64_t id) {
  std::lock_guard lk(mu_);
  // The engine may finish a request before submitted() records it (a cancelled or failing
  // request on a fast engine); the reservation is released either way, exactly once.
  if (!running_.erase(id)) ended_early_.insert(id);
  --reserved_;
  if (reserved_ == 0) idle_.notify_all();
}

int64_t Admission::in_flight() const {
  std::lock_guard lk(mu_);
  return reserved_;
}

bool Admission::draining() const {
  std::lock_guard lk(mu_);
  return draining_;
}

void Admission::drain(Engine& engine, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lk(mu_);
  draining_ = true;
  idle_.wait_until(lk, deadline, [&] { return reserved_ == 0; });
  const std::vector<uint64_t> left(running_.begin(), running_.end());
  lk.unlock();
  for (uint64_t id : left) engine.cancel(id);
  lk.lock();
  // Cancelled requests end at the engine's next step; bound the wait all the same.
  idle_.wait_for(lk, std::chrono::seconds(10), [&] { return reserved_ == 0; });
}

}  // namespace dllm::server
