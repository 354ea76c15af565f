// SwiGLU's element: silu(g) * u in fp32, the one formula the SwiGLU kernel (elementwise.cu) and
// the MoE grouped GEMM's fused epilogue (moe_ffn.cu) share, so the two give the same bits.
#pragma once

namespace dllm::cuda {

__device__ __forceinline__ float silu_times(float g, float u) {
  return g / (1.0f + __expf(-g)) * u;
}

}  // namespace dllm::cuda
