#include "backend/cuda/forward_lane.h"

#include "backend/cuda/cuda_check.h"

namespace dllm::cuda_backend {

void ForwardLane::create(int priority) {
  DLLM_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
  DLLM_CUBLAS_CHECK(cublasCreate(&cublas));
  DLLM_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  cublas_workspace.resize(size_t(32) << 20, "the cuBLAS workspace");
  DLLM_CUBLAS_CHECK(cublasSetWorkspace(cublas, cublas_workspace.get(), cublas_workspace.size()));
}

void ForwardLane::release() {
  if (cublas) cublasDestroy(cublas);
  if (stream) cudaStreamDestroy(stream);
  cublas = nullptr;
  stream = nullptr;
}

}  // namespace dllm::cuda_backend
