// cuBLAS GEMMs in the layout the transformer uses: row-major activations times row-major
// [out, in] weights, bf16 operands, fp32 accumulation.
#pragma once

#include <cublas_v2.h>

#include "backend/cuda/kernels.h"

namespace dllm::cuda {

// out[m, n] = a[m, k] · w[n, k]ᵀ, or out += ... when accumulate (fp32 output only).
// out_type: CUDA_R_32F or CUDA_R_16BF.
void gemm_nt(cublasHandle_t handle, const bf16* a, const bf16* w, void* out,
             cudaDataType_t out_type, int m, int n, int k, bool accumulate);

}  // namespace dllm::cuda
