#include "backend/cuda/gemm.h"

#include "backend/cuda/cuda_check.h"

namespace dllm::cuda {

void gemm_nt(cublasHandle_t handle, const bf16* a, const bf16* w, void* out,
             cudaDataType_t out_type, int m, int n, int k, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (accumulate && out_type != CUDA_R_32F) fail("gemm_nt: accumulation needs an fp32 output");
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Column-major view: outᵀ [n, m] = W [n, k] (stored as k x n, transposed) · aᵀ [k, m].
  DLLM_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF,
                                 k, a, CUDA_R_16BF, k, &beta, out, out_type, n, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
}

}  // namespace dllm::cuda
