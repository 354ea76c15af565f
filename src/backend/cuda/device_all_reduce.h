// The sum over a tensor-parallel group that a CUDA rank calls after its o and down projections
// (CudaBackend::set_partial_sum_reduce): enqueued on the forward's stream, so a captured CUDA
// graph holds it like any kernel. NCCL implements it (cuda_rank_group.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dllm::cuda_backend {

class DeviceAllReduce {
 public:
  virtual ~DeviceAllReduce() = default;
  // In place: every rank's `count` floats at `data` become the group's sum, on every rank.
  virtual void sum(float* data, int64_t count, cudaStream_t stream) = 0;
};

}  // namespace dllm::cuda_backend
