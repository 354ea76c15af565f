// The Hopper kernel's in-kernel merge of its splits (attention_sm90.cu, single-sequence calls
// whose grid is one wave): the blocks of a row block and KV head wait for each other and merge a
// share of the rows each, with the arithmetic of attention_merge.cuh — bit for bit what the
// combine pass computes, so both paths give one result.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/attention_sm90_tile.cuh"  // kD
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"

namespace dllm::cuda::sm90 {

using namespace ptx;

// Splits merged in the kernel (no combine pass) at most.
constexpr int kMaxMergedSplits = 64;

struct MergeArgs {  // what merging needs of the sequence and the block
  const float* partial_ml;
  const bf16* partial_o;
  bf16* out;
  int32_t* counters;                  // attention_split_counters(), or the batch workspace's
  int splits, heads, kv_heads, rows;  // rows: per KV head (n_q x group)
  int row_block, split;               // this block's
  int counter;                        // its (arrived, merged) pair: counters[2 counter ..]
  int kv_head;                        // its KV head
};

// What the combine pass of attention.cu does, for one row r of KV head g, by one warp: out =
// sum_s w_s (O_s / l_s) / sum_s w_s with w_s = l_s e^(m_s - max m), over the splits' partials in
// L2 (written by other blocks: read with .cg, past L1). `weight` is the warp's scratch for
// kMaxMergedSplits floats. Lanes 16h + c take dims 8c..8c+7 of the splits s = h mod 2, with
// 16-byte loads issued eight splits at a time (one L2 round trip per eight, not per split; the
// first eight go out with the (m, l) loads).
__device__ __forceinline__ void merge_row(const MergeArgs& p, int g, int r, int lane,
                                          float* weight) {
  const int rows = p.rows;
  const int64_t split_rows = static_cast<int64_t>(p.kv_heads) * rows;
  const int64_t row = static_cast<int64_t>(g) * rows + r;
  const int half = lane >> 4, c = lane & 15;
  const bf16* po = p.partial_o + row * kD + 8 * c;
  auto load = [&](int s) {
    return __ldcg(reinterpret_cast<const uint4*>(po + s * split_rows * kD));
  };
  // The first splits' partials are requested with the (m, l) they are weighted by.
  constexpr int kPrefetch = 8;
  uint4 pre[kPrefetch];
#pragma unroll
  for (int i = 0; i < kPrefetch; ++i)
    pre[i] = half + 2 * i < p.splits ? load(half + 2 * i) : make_uint4(0, 0, 0, 0);
  float ms[2], ls[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int s = lane + 32 * h;
    const float2 ml =
        s < p.splits ? __ldcg(reinterpret_cast<const float2*>(p.partial_ml) + s * split_rows + row)
                     : make_float2(-INFINITY, 0.0f);
    ms[h] = ml.x;
    ls[h] = ml.y;
  }
  float mx = fmaxf(ms[0], ms[1]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  // attention_merge.cuh's order: lane i sums splits i and i + 32, then the butterfly.
  float denom = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float w = split_weight(ms[h], ls[h], mx);
    weight[lane + 32 * h] = w;
    denom += w;
  }
  denom = butterfly_sum(denom);
  __syncwarp();
  float acc[8] = {};
  auto accumulate = [&](const uint4& bits, float w) {
    const uint32_t u[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u[i]));
      acc[2 * i] = fmaf(w, f.x, acc[2 * i]);
      acc[2 * i + 1] = fmaf(w, f.y, acc[2 * i + 1]);
    }
  };
#pragma unroll
  for (int i = 0; i < kPrefetch; ++i)
    if (half + 2 * i < p.splits) accumulate(pre[i], weight[half + 2 * i]);
#pragma unroll 8
  for (int s = half + 2 * kPrefetch; s < p.splits; s += 2) accumulate(load(s), weight[s]);
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 16);
  if (half == 0) {
    const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;  // a row that sees nothing: zeros
    const int group = p.heads / p.kv_heads;
    const int qi = r / group, h = g * group + r % group;
    uint4 out;
    uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(acc[2 * i] * inv, acc[2 * i + 1] * inv);
      o[i] = *reinterpret_cast<const uint32_t*>(&b);
    }
    *reinterpret_cast<uint4*>(p.out + (static_cast<int64_t>(qi) * p.heads + h) * kD + 8 * c) = out;
  }
  __syncwarp();  // weight[] is rewritten for the warp's next row
}

// The end of a merging block (attention_sm90_kernel<..., MERGE = true> and its batched twin, after
// its partials are written): the splits of its row block and KV head merge their partials
// themselves once all are written, each split a share of the rows. No combine pass: its wait for
// the whole grid to drain, its launch and its own latency cost more than the merge (at 32K context
// on the H100, 65.5 -> 62.4 µs per call). Waiting on other blocks is safe because the host merges
// only when the whole grid is resident at once (sm90_attention_merges()). Not inlined: the merge's
// registers stay out of the main loop's budget. `scratch_offset`: where in dynamic shared memory
// (free after the main loop) kMaxMergedSplits floats per warp may go.
__device__ __noinline__ void merge_splits(const MergeArgs* args, int rows_per_block,
                                          uint32_t scratch_offset) {
  // The arguments and the scratch come from shared memory: values kept in registers from before
  // the main loop would hold registers through it (and spill there).
  const MergeArgs p = *args;
  if (p.splits == 1) return;  // the block wrote the output itself (write_split_partials())
  int32_t* counters = p.counters;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  float* scratch =
      reinterpret_cast<float*>(smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u) + scratch_offset);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = p.kv_head, split = p.split, row0 = p.row_block * rows_per_block;
  counters += 2 * p.counter;  // (arrived, merged) of this row block and head
  __syncthreads();
  if (tid == 0) {
    // Release: the block's partials (every thread's, ordered before this by the barrier) are
    // visible before it counts as arrived.
    __threadfence();
    atomicAdd(counters, 1);
    while (load_acquire(counters) < p.splits) __nanosleep(32);
  }
  __syncthreads();
  const int rows_here = min(p.rows - row0, rows_per_block);
  const int warps = blockDim.x >> 5;
  for (int r = split + warp * p.splits; r < rows_here; r += warps * p.splits)
    merge_row(p, g, row0 + r, lane, scratch + warp * kMaxMergedSplits);
  __syncthreads();
  // The last block out resets both counters for the next call (every block has seen all
  // arrivals by now).
  if (tid == 0 && atomicAdd(counters + 1, 1) == p.splits - 1) {
    counters[0] = 0;
    counters[1] = 0;
  }
}

}  // namespace dllm::cuda::sm90
