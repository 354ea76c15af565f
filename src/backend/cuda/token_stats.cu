// Greedy TokenStats over the vocabulary, one block per row: max/argmax/second max, then the
// log-sum-exp, entropy and sum-of-squares sums — only five numbers per row leave the device.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl_launch.h"

namespace dllm::cuda {

namespace {

constexpr int kThreads = 512;

struct Top2 {
  float best;
  int idx;
  float second;
};

// Orders by value, then by lower index (argmax ties go to the lowest id, as on the CPU).
__device__ __forceinline__ Top2 merge(Top2 a, Top2 b) {
  const bool a_wins = a.best > b.best || (a.best == b.best && a.idx < b.idx);
  Top2 r;
  if (a_wins) {
    r.best = a.best;
    r.idx = a.idx;
    r.second = fmaxf(a.second, b.best);
  } else {
    r.best = b.best;
    r.idx = b.idx;
    r.second = fmaxf(b.second, a.best);
  }
  return r;
}

__device__ __forceinline__ bool banned(const BannedTokens& b, int id) {
  for (int k = 0; k < b.n; ++k)
    if (b.ids[k] == id) return true;
  return false;
}

// The statistics of one row (one block of kThreads threads).
__device__ void row_stats(const float* row, int vocab, const BannedTokens& ban,
                          DeviceTokenStats* out) {
  __shared__ Top2 part[kThreads / 32];
  __shared__ float sums[3][kThreads / 32];
  __shared__ Top2 total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  Top2 t{-INFINITY, 0x7fffffff, -INFINITY};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    if (ban.n && banned(ban, i)) continue;
    t = merge(t, Top2{row[i], i, -INFINITY});
  }
  for (int o = 16; o > 0; o >>= 1) {
    Top2 other;
    other.best = __shfl_xor_sync(0xffffffffu, t.best, o);
    other.idx = __shfl_xor_sync(0xffffffffu, t.idx, o);
    other.second = __shfl_xor_sync(0xffffffffu, t.second, o);
    t = merge(t, other);
  }
  if (lane == 0) part[warp] = t;
  __syncthreads();
  if (threadIdx.x == 0) {
    Top2 r = part[0];
    for (int w = 1; w < kThreads / 32; ++w) r = merge(r, part[w]);
    total = r;
  }
  __syncthreads();
  const float mx = total.best;

  // sum e^(l - mx), sum e^(l - mx) (l - mx), sum e^(2 (l - mx))
  float z = 0.0f, zl = 0.0f, z2 = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    if (ban.n && banned(ban, i)) continue;
    const float d = row[i] - mx;
    const float e = __expf(d);
    z += e;
    zl += e * d;
    z2 += e * e;
  }
  for (int o = 16; o > 0; o >>= 1) {
    z += __shfl_xor_sync(0xffffffffu, z, o);
    zl += __shfl_xor_sync(0xffffffffu, zl, o);
    z2 += __shfl_xor_sync(0xffffffffu, z2, o);
  }
  if (lane == 0) {
    sums[0][warp] = z;
    sums[1][warp] = zl;
    sums[2][warp] = z2;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float zt = 0.0f, zlt = 0.0f, z2t = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) {
      zt += sums[0][w];
      zlt += sums[1][w];
      z2t += sums[2][w];
    }
    DeviceTokenStats s;
    s.argmax = total.idx;
    s.p_max = 1.0f / zt;
    s.entropy = logf(zt) - zlt / zt;
    s.margin = (1.0f - __expf(total.second - mx)) / zt;
    s.collision = z2t / (zt * zt);
    *out = s;
  }
}

__global__ void __launch_bounds__(kThreads)
    greedy_stats_kernel(const float* logits, int vocab, BannedTokens ban, DeviceTokenStats* out) {
  ptx::wait_for_primary_grid();  // a programmatic dependent of the LM head GEMM
  row_stats(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab, ban, out + blockIdx.x);
}

// Rows of many sequences in one launch, each with its sequence's banned list.
__global__ void __launch_bounds__(kThreads)
    greedy_stats_rows_kernel(const float* logits, int vocab, const int32_t* bans,
                             const int32_t* row_ban, DeviceTokenStats* out) {
  ptx::wait_for_primary_grid();
  const int set = row_ban[blockIdx.x];
  if (set < 0) return;  // a row whose statistics come from the host, or padding
  BannedTokens ban;
  const int32_t* b = bans + set * kBannedInts;
  for (int k = 0; k < kMaxBanned; ++k) ban.ids[k] = b[k];
  ban.n = b[kMaxBanned];
  row_stats(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab, ban, out + blockIdx.x);
}

}  // namespace

void greedy_token_stats(const float* logits, int rows, int vocab, BannedTokens banned,
                        DeviceTokenStats* out, cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(greedy_stats_kernel, dim3(rows), dim3(kThreads), 0, stream, logits, vocab, banned,
             out);
  DLLM_CUDA_LAUNCH_CHECK();
}

void greedy_token_stats_rows(const float* logits, int rows, int vocab, const int32_t* bans,
                             const int32_t* row_ban, DeviceTokenStats* out, cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(greedy_stats_rows_kernel, dim3(rows), dim3(kThreads), 0, stream, logits, vocab, bans,
             row_ban, out);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
