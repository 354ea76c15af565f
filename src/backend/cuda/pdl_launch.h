// Programmatic dependent launch (compute capability 9.0+): a kernel launched this way may be
// scheduled while the kernel before it in the stream is still finishing; it must call
// ptx::wait_for_primary_grid() (mma_ptx.cuh) before touching anything that kernel reads or writes.
// Hides the launch latency of the small kernels of a step (norms, RoPE, attention and its combine,
// SwiGLU, token stats; a few µs per layer on the H100). Elsewhere, or with DLLM_PDL=0
// (comparisons), it is an ordinary launch.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_query.h"

namespace dllm::cuda {

inline bool device_has_pdl() {
  static const bool enabled = env_switch_on("DLLM_PDL");
  return enabled && device_compute_capability() >= 90;
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (device_has_pdl()) {
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  DLLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace dllm::cuda
