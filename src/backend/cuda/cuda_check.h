// Error checks for CUDA runtime and cuBLAS calls: failures become dllm::Error naming the call, so
// an out-of-memory situation is a clear message, not a crash.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define DLLM_CUDA_CHECK(call)                                                                    \
  do {                                                                                           \
    const cudaError_t dllm_err_ = (call);                                                        \
    if (dllm_err_ != cudaSuccess)                                                                \
      ::dllm::fail("CUDA error in ", #call, ": ", cudaGetErrorString(dllm_err_), " (", __FILE__, \
                   ":", __LINE__, ")");                                                          \
  } while (0)

#define DLLM_CUBLAS_CHECK(call)                                                            \
  do {                                                                                     \
    const cublasStatus_t dllm_st_ = (call);                                                \
    if (dllm_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::dllm::fail("cuBLAS error in ", #call, ": ", cublasGetStatusString(dllm_st_), " (", \
                   __FILE__, ":", __LINE__, ")");                                          \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define DLLM_CUDA_LAUNCH_CHECK() DLLM_CUDA_CHECK(cudaGetLastError())
