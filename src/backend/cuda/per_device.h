// Values that belong to one CUDA device. A kernel's dynamic shared-memory opt-in
// (cudaFuncSetAttribute) holds only on the device that was current when it was set, and occupancy
// and SM counts are properties of a device; a process that drives several GPUs (a tensor-parallel
// group: one thread per rank, each on its own device) must compute them on each.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "backend/cuda/cuda_check.h"

namespace dllm::cuda {

inline constexpr int kMaxDevices = 64;

// The calling thread's current device; fails beyond kMaxDevices.
inline int current_device() {
  int dev = 0;
  DLLM_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices)
    fail("CUDA device ", dev, " is beyond the ", kMaxDevices, " devices this build supports");
  return dev;
}

// A value computed once per device, thread-safely, on first use from a thread whose current
// device it is. Use as `static PerDevice<int> resident; return resident.get([] { ... });`.
template <class T>
class PerDevice {
 public:
  template <class Compute>
  const T& get(Compute&& compute) {
    const int dev = current_device();
    std::call_once(once_[dev], [&] { values_[dev] = compute(); });
    return values_[dev];
  }

 private:
  std::array<std::once_flag, kMaxDevices> once_;
  std::array<T, kMaxDevices> values_{};
};

}  // namespace dllm::cuda
