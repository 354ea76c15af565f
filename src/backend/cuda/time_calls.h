// Microseconds per call of a kernel launcher, timed with CUDA events on the default stream: the
// benchmarks' one timing loop (attention_bench.cu, sparse_prefill_bench.cu).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace dllm::cuda {

// `call(i)` for i < warm (warm-up: kernel attributes, first touches), then timed for i < reps.
template <class Call>
double time_calls(Call&& call, int warm, int reps) {
  for (int i = 0; i < warm; ++i) call(i);
  cudaEvent_t start, stop;
  DLLM_CUDA_CHECK(cudaEventCreate(&start));
  DLLM_CUDA_CHECK(cudaEventCreate(&stop));
  DLLM_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < reps; ++i) call(i);
  DLLM_CUDA_CHECK(cudaEventRecord(stop));
  DLLM_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  DLLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e3 / reps;
}

}  // namespace dllm::cuda
