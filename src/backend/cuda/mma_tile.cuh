// The tensor-core math of one key tile that the mma.sync flash kernels share (attention_mma.cuh,
// sparse_prefill.cu): S = Q K^T into the per-lane score layout of flash_tile.cuh, and O += P V;
// the B-fragment addressing that the MoE grouped GEMM (moe_ffn.cu) shares.
// K and V tiles sit in shared memory as rows of `kStride` bf16 (padded: conflict-free ldmatrix).
#pragma once

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"

namespace dllm::cuda {

// Lane l's ldmatrix row address for the B fragments of keys (GEMM: columns) nt*8 .. nt*8 + 7 of a
// [key][dim] tile: key nt*8 + l%8; lanes 8-15, 16-23, 24-31 the next 8-dim columns, so that one
// ldmatrix_x4 at + kk*16 gives b0, b1 of dims kk*16.. and of (kk+1)*16...
template <int kStride>
__device__ __forceinline__ const bf16* b_fragment_row(const bf16* kt, int nt, int lane) {
  return &kt[(nt * 8 + (lane & 7)) * kStride + (lane >> 3) * 8];
}

// s[nt][e] = q . k for the lane's rows and keys nt * 8 + 2 (lane % 4) + (e & 1) of the tile.
// qf: the rows' Q fragments (m16n8k16 A layout) for D / 16 slices of 16 dims.
template <int D, int KT, int kStride>
__device__ __forceinline__ void tile_scores(const uint32_t (&qf)[D / 16][4], const bf16* kt,
                                            float (&s)[KT / 8][4], int lane) {
  using namespace ptx;
#pragma unroll
  for (int nt = 0; nt < KT / 8; ++nt) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    const bf16* krow = b_fragment_row<kStride>(kt, nt, lane);
    if constexpr (D % 32 == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t b[4];  // b0, b1 of dims kk*16.. and of (kk+1)*16..
        ldmatrix_x4(b, krow + kk * 16);
        mma_bf16(s[nt], qf[kk], b[0], b[1]);
        mma_bf16(s[nt], qf[kk + 1], b[2], b[3]);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t b[2];
        ldmatrix_x2(b, krow + kk * 16);  // lanes 0-15 give the addresses
        mma_bf16(s[nt], qf[kk], b[0], b[1]);
      }
    }
  }
}

// tile_scores for MT row tiles of 16 at once (rows m * 16 .. of qf[m] into s[m]): each key
// fragment is loaded from shared memory once for MT MMAs (the selection's score sums, whose
// shared-memory reads bound them with one row tile per warp).
template <int D, int KT, int kStride, int MT>
__device__ __forceinline__ void tile_scores_rows(const uint32_t (&qf)[MT][D / 16][4],
                                                 const bf16* kt, float (&s)[MT][KT / 8][4],
                                                 int lane) {
  using namespace ptx;
#pragma unroll
  for (int nt = 0; nt < KT / 8; ++nt) {
#pragma unroll
    for (int m = 0; m < MT; ++m) s[m][nt][0] = s[m][nt][1] = s[m][nt][2] = s[m][nt][3] = 0.0f;
    const bf16* krow = b_fragment_row<kStride>(kt, nt, lane);
    if constexpr (D % 32 == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, krow + kk * 16);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          mma_bf16(s[m][nt], qf[m][kk], b[0], b[1]);
          mma_bf16(s[m][nt], qf[m][kk + 1], b[2], b[3]);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t b[2];
        ldmatrix_x2(b, krow + kk * 16);
#pragma unroll
        for (int m = 0; m < MT; ++m) mma_bf16(s[m][nt], qf[m][kk], b[0], b[1]);
      }
    }
  }
}

// o += P V over the tile's keys, P = s after online_softmax_tile (rounded to bf16).
template <int D, int KT, int kStride>
__device__ __forceinline__ void tile_accumulate_pv(const float (&s)[KT / 8][4], const bf16* vt,
                                                   float (&o)[D / 8][4], int lane) {
  using namespace ptx;
#pragma unroll
  for (int t = 0; t < KT / 16; ++t) {
    const uint32_t a[4] = {pack_bf16(s[2 * t][0], s[2 * t][1]), pack_bf16(s[2 * t][2], s[2 * t][3]),
                           pack_bf16(s[2 * t + 1][0], s[2 * t + 1][1]),
                           pack_bf16(s[2 * t + 1][2], s[2 * t + 1][3])};
    // Matrices: keys t*16+0..7 / +8..15 of dims dn*8.., then the same of (dn+1)*8..; lane l
    // addresses row l%8 of matrix l/8.
    const bf16* vrow = &vt[(t * 16 + (lane & 8) + (lane & 7)) * kStride + (lane >> 4) * 8];
#pragma unroll
    for (int dn = 0; dn < D / 8; dn += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vrow + dn * 8);
      mma_bf16(o[dn], a, b[0], b[1]);
      mma_bf16(o[dn + 1], a, b[2], b[3]);
    }
  }
}

}  // namespace dllm::cuda
