// The MoE grouped GEMM's Hopper kernel (moe_gemm_sm90.cu: wgmma, sm_90a only), which
// moe_grouped_gemm() (moe_ffn.cu) runs instead of its mma.sync kernel on a compute-capability 9.0
// device. Same parameters, work list and tiles of rows; its own arithmetic (wgmma's), the same for
// every row of every batch on that device (batch invariant).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/kernels.h"

namespace dllm::cuda {

// Whether the Hopper kernel runs the grouped GEMM on the current device: compute capability 9.0,
// and not switched off with DLLM_MOE_SM90=0 (comparisons).
bool sm90_moe_gemm_serves();
// The shortest k moe_grouped_gemm() gives the Hopper kernel.
constexpr int kSm90MoeMinK = 1024;
// The grid: `items` blocks a column tile (moe_work_list_ints() - 2), `col_tiles` column tiles of
// moe_tile::kTileCols columns (moe_gemm_tile.cuh), as the mma.sync kernel's.
void sm90_moe_grouped_gemm(const MoeGemmParams& p, unsigned items, unsigned col_tiles,
                           cudaStream_t stream);

}  // namespace dllm::cuda
