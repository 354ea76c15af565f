// What the kernels' launch decisions need to know: the current device (read once per device)
// and the environment switches that turn a mechanism off for comparisons.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "backend/cuda/per_device.h"

namespace dllm::cuda {

// The current device's compute capability as 10 major + minor (90 for an H100), read once per
// device; 0 if there is no device.
inline int device_compute_capability() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  static PerDevice<int> cc;
  return cc.get([dev] {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
      return 0;
    return 10 * major + minor;
  });
}

// The current device's number of SMs, read once per device; 0 if there is no device.
inline int device_sm_count() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  static PerDevice<int> n;
  return n.get([dev] {
    int count = 0;
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 0;
    return count;
  });
}

// False when environment variable `name` is set to 0 (DLLM_PDL, DLLM_ATTN_SM90, DLLM_ATTN_MERGE,
// DLLM_CUDA_GRAPHS), true otherwise. Callers read it once.
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return !v || std::string(v) != "0";
}

}  // namespace dllm::cuda
