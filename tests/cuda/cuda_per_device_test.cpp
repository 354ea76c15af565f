// PerDevice: a kernel's shared-memory opt-in and occupancy are per device, so a value cached for
// the first GPU must not stand for the second (the tensor-parallel group's ranks failed with
// "invalid argument" at launch when it did).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/per_device.h"

namespace dllm::cuda {
namespace {

TEST(CudaPerDevice, ComputesOnceOnEachDevice) {
  int devices = 0;
  DLLM_CUDA_CHECK(cudaGetDeviceCount(&devices));
  PerDevice<int> value;
  int calls = 0;
  for (int round = 0; round < 2; ++round) {
    for (int dev = 0; dev < devices; ++dev) {
      DLLM_CUDA_CHECK(cudaSetDevice(dev));
      EXPECT_EQ(value.get([&] {
        ++calls;
        return 100 + current_device();
      }),
                100 + dev);
    }
  }
  EXPECT_EQ(calls, devices);  // the second round reads what the first computed
  DLLM_CUDA_CHECK(cudaSetDevice(0));
}

}  // namespace
}  // namespace dllm::cuda
