// What the MoE grouped GEMM's two kernels share (moe_ffn.cu's mma.sync kernel and
// moe_gemm_sm90.cu's wgmma kernel): a work item's rows and weights, the weight row behind a tile
// column (with the fused SwiGLU's gate / up pairing), and the stores of the outputs.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/silu.cuh"

namespace dllm::cuda::moe_tile {

// Output columns of a block (the grid's column tiles): half as many intermediate features with
// the fused SwiGLU.
constexpr int kTileCols = 128;

// A block's work item (moe_sort's list): kMoeTileRows of expert e's sorted rows from a0 on, or of
// the extra (shared) expert's, whose rows are sorted positions 0 .. extra_rows - 1.
struct Item {
  int a0 = 0, rows = 0;     // the first sorted position, the rows in the tile
  const bf16* w = nullptr;  // the expert's weights [n_out, k]
};

__device__ __forceinline__ Item work_item(const MoeGemmParams& p, int index) {
  const int item = p.work[2 + index];
  const int e = item & 1023;
  const bool extra = e == p.experts;
  Item it;
  it.a0 = (extra ? 0 : p.offsets[e]) + (item >> 10) * kMoeTileRows;
  it.rows = min(kMoeTileRows, (extra ? p.extra_rows : p.offsets[e + 1]) - it.a0);
  it.w = extra ? p.extra_w : p.w + static_cast<int64_t>(e) * p.n_out * p.k;
  return it;
}

// The input row of the tile's row r (gathered through `order`), or null past the tile's end.
__device__ __forceinline__ const bf16* input_row(const MoeGemmParams& p, const Item& it, int r) {
  if (r >= it.rows) return nullptr;
  const int64_t row = p.order ? p.order[it.a0 + r] / p.top_k : it.a0 + r;
  return p.in + row * p.k;
}

// The weight row behind tile column c (0 .. kTileCols - 1) of column tile `col_tile`, or null
// past the weights: the plain GEMM's output column; with the SwiGLU, each group of kGroup tile
// columns is kGroup / 2 gate rows and then the up rows (inter further) of the same intermediate
// features, so that one lane's accumulators hold both products of a feature.
template <int kTileCols, int kGroup>
__device__ __forceinline__ const bf16* weight_row(const MoeGemmParams& p, const Item& it,
                                                  int col_tile, int c) {
  int row;
  if (!p.swiglu) {
    row = col_tile * kTileCols + c;
    if (row >= p.n_out) return nullptr;
  } else {
    const int inter = p.n_out / 2, half = c % kGroup / (kGroup / 2);
    const int j = col_tile * (kTileCols / 2) + c / kGroup * (kGroup / 2) + c % (kGroup / 2);
    if (j >= inter) return nullptr;
    row = half * inter + j;
  }
  return it.w + static_cast<int64_t>(row) * p.k;
}

// A thread's share of a block's chunk copies, as both kernels split them: 16-byte vector `vec` (of
// kVecsPerRow a row and chunk) of tile rows row0, row0 + kRowStep, ... — its input rows (null past
// the item's rows) and its weight rows (null past the weights; kGroup as weight_row's). The
// kernels' loaders add where in shared memory the copies go.
template <int kTileRows, int kTileCols, int kRowStep, int kVecsPerRow>
struct ChunkSources {
  const bf16* rows[kTileRows / kRowStep];
  const bf16* wrows[kTileCols / kRowStep];
  const bf16* any;  // a valid address for zero-filling copies
  int row0, vec, k, used_rows;

  template <int kGroup>
  __device__ __forceinline__ void set(const MoeGemmParams& p, const Item& it, int col_tile) {
    any = p.w;
    row0 = threadIdx.x / kVecsPerRow;
    vec = threadIdx.x % kVecsPerRow;
    k = p.k;
    used_rows = (it.rows + 15) / 16 * 16;
#pragma unroll
    for (int i = 0; i < kTileRows / kRowStep; ++i) rows[i] = input_row(p, it, row0 + i * kRowStep);
#pragma unroll
    for (int i = 0; i < kTileCols / kRowStep; ++i)
      wrows[i] = weight_row<kTileCols, kGroup>(p, it, col_tile, row0 + i * kRowStep);
  }
};

// out[a, col] = v, fp32 or bf16 (a: the sorted position).
__device__ __forceinline__ void store(const MoeGemmParams& p, int64_t a, int col, float v) {
  if (col >= p.n_out) return;
  if (p.out_f32) {
    static_cast<float*>(p.out)[a * p.n_out + col] = v;
  } else {
    static_cast<bf16*>(p.out)[a * p.n_out + col] = __float2bfloat16(v);
  }
}

// The fused SwiGLU's output of feature j from its gate and up products: rounded to bf16 first, as
// a bf16 GEMM followed by swiglu() (elementwise.cu) would see them.
__device__ __forceinline__ void store_swiglu(const MoeGemmParams& p, int64_t a, int j, float g,
                                             float u) {
  const int inter = p.n_out / 2;
  if (j >= inter) return;
  const float gb = __bfloat162float(__float2bfloat16(g));
  const float ub = __bfloat162float(__float2bfloat16(u));
  static_cast<bf16*>(p.out)[a * inter + j] = __float2bfloat16(silu_times(gb, ub));
}

}  // namespace dllm::cuda::moe_tile
