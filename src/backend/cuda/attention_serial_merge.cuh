// The merge at the end of a serial work item (batch_layout::kSerialSplit: one block computed all
// of its sequence's splits, one after the other, and wrote each split's partials as a split block
// would, write_split_partials()). Each warp merges its own 16 rows, lane by lane in the fragment
// layout the kernels hold (flash_tile.cuh: a lane has rows ra and ra + 8, dims 8 dn + 2 (lane % 4)
// and + 1), reading back the partials it has just written (plain loads: its own stores, and the
// (m, l) of its quad's first lane after a __syncwarp(), which orders them; mostly L2 hits).
//
// Bit for bit what the combine pass computes (attention_merge.cuh's order), so that a sequence
// gives one result whether its splits run side by side or in one block:
//   M      = max_s m_s
//   w_s    = split_weight(m_s, l_s, M)
//   denom  = the butterfly sum of 32 lane sums, lane i holding 0 + w_i (splits <= 16 < 32: one
//            split per lane, the rest 0), evaluated here as the tree lane 0 ends with
//   acc[d] = even + odd, fmaf chains over the even and the odd splits in increasing s
//   out[d] = bf16_rn(acc[d] * (denom > 0 ? 1 / denom : 0))
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_batch_layout.h"
#include "backend/cuda/attention_merge.cuh"

namespace dllm::cuda {

// The value every lane ends with in butterfly_sum (xor 16, 8, 4, 2, 1) of v: v[i] + v[i ^ o] at
// each level, followed along lane 0 (all lanes end equal: float addition commutes).
__device__ __forceinline__ float butterfly_sum_of(const float (&v)[32]) {
  float a[16], b[8], c[4];
#pragma unroll
  for (int i = 0; i < 16; ++i) a[i] = v[i] + v[i + 16];
#pragma unroll
  for (int i = 0; i < 8; ++i) b[i] = a[i] + a[i + 8];
#pragma unroll
  for (int i = 0; i < 4; ++i) c[i] = b[i] + b[i + 4];
  return (c[0] + c[2]) + (c[1] + c[3]);
}

// Merges the serial splits of this warp's rows ra and ra + 8 (of `rows` rows per KV head, KV
// head g) into the output. P: AttentionSeqView (attention_seq.cuh). Not inlined: its registers
// stay out of the main loop's budget (the Hopper kernel has none to spare).
template <int DN, class P>
__device__ __noinline__ void merge_serial_splits(const P& p, int g, int rows, int ra, int lane) {
  constexpr int D = DN * 8;
  constexpr int kMax = batch_layout::kMaxSerialSplits;
  static_assert(kMax <= 16, "one split per lane of the first half-warp (butterfly_sum_of)");
  const int splits = p.splits;
  const int group = p.heads / p.kv_heads;
  const int64_t split_rows = static_cast<int64_t>(p.kv_heads) * rows;
  __syncwarp();  // the (m, l) of each row, written by one lane of its quad, are visible
#pragma unroll 1
  for (int h2 = 0; h2 < 2; ++h2) {
    const int row = ra + 8 * h2;
    if (row >= rows) continue;
    const int64_t row0 = static_cast<int64_t>(g) * rows + row;
    float w[kMax];  // the split weights
    float mx = -INFINITY;
    {
      float2 ml[kMax];
#pragma unroll
      for (int s = 0; s < kMax; ++s)
        ml[s] = s < splits ? reinterpret_cast<const float2*>(p.partial_ml)[s * split_rows + row0]
                           : make_float2(-INFINITY, 0.0f);
#pragma unroll
      for (int s = 0; s < kMax; ++s) mx = fmaxf(mx, ml[s].x);
#pragma unroll
      for (int s = 0; s < kMax; ++s) w[s] = s < splits ? split_weight(ml[s].x, ml[s].y, mx) : 0.0f;
    }
    float lane_sums[32];
#pragma unroll
    for (int s = 0; s < 32; ++s) lane_sums[s] = 0.0f;
#pragma unroll
    for (int s = 0; s < kMax; ++s)
      if (s < splits) lane_sums[s] += w[s];
    const float denom = butterfly_sum_of(lane_sums);
    const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;  // a row that sees nothing: zeros
    const int64_t out_row = static_cast<int64_t>(row / group) * p.heads + g * group + row % group;
    const __nv_bfloat16* po = p.partial_o + row0 * D + (lane % 4) * 2;
    // Half of the lane's dims at a time (registers: the Hopper kernel's are capped at 128).
    constexpr int kHalf = DN > 1 ? DN / 2 : 1;
#pragma unroll 1
    for (int dn0 = 0; dn0 < DN; dn0 += kHalf) {
      float even[kHalf][2] = {}, odd[kHalf][2] = {};
#pragma unroll
      for (int s = 0; s < kMax; ++s) {
        if (s >= splits) break;
        auto accumulate = [&](float(&acc)[kHalf][2]) {
#pragma unroll
          for (int i = 0; i < kHalf; ++i) {
            const uint32_t bits =
                *reinterpret_cast<const uint32_t*>(po + s * split_rows * D + (dn0 + i) * 8);
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
            acc[i][0] = fmaf(w[s], f.x, acc[i][0]);
            acc[i][1] = fmaf(w[s], f.y, acc[i][1]);
          }
        };
        if (s & 1)  // s is a constant here (unrolled): no run-time choice of array
          accumulate(odd);
        else
          accumulate(even);
      }
#pragma unroll
      for (int i = 0; i < kHalf; ++i) {
        const int d = (dn0 + i) * 8 + (lane % 4) * 2;
        *reinterpret_cast<__nv_bfloat162*>(&p.out[out_row * D + d]) =
            __floats2bfloat162_rn((even[i][0] + odd[i][0]) * inv, (even[i][1] + odd[i][1]) * inv);
      }
    }
  }
}

}  // namespace dllm::cuda
