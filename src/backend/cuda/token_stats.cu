// Greedy softmax sums over the vocabulary (or a tensor-parallel rank's slice of it), one block
// per row: max/argmax/second max and the normaliser, entropy and sum-of-squares sums in one pass
// — only six numbers per row leave the device; the host finishes TokenStats from them.
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

// Softmax sums relative to a running maximum m: z = sum e^(l-m), zl = sum e^(l-m) (l-m),
// z2 = sum e^(2(l-m)). One pass over the row: a row of a 152K vocabulary is 600 KB, so a second
// pass (max first, then the sums) read the logits from DRAM twice.
struct SoftmaxSums {
  float m = -INFINITY, z = 0.0f, zl = 0.0f, z2 = 0.0f;
};

// The sums re-expressed relative to a larger maximum mx (e^(l-mx) = s e^(l-m) with s = e^(m-mx)).
__device__ __forceinline__ SoftmaxSums rebase(const SoftmaxSums& a, float mx) {
  if (a.m == -INFINITY) return {mx, 0.0f, 0.0f, 0.0f};  // nothing seen yet
  const float shift = a.m - mx, s = __expf(shift);
  return {mx, s * a.z, s * (a.zl + a.z * shift), s * s * a.z2};
}

__device__ __forceinline__ SoftmaxSums merge(const SoftmaxSums& a, const SoftmaxSums& b) {
  const float mx = fmaxf(a.m, b.m);
  if (mx == -INFINITY) return a;
  const SoftmaxSums x = rebase(a, mx), y = rebase(b, mx);
  return {mx, x.z + y.z, x.zl + y.zl, x.z2 + y.z2};
}

struct RowState {
  Top2 top{-INFINITY, 0x7fffffff, -INFINITY};
  SoftmaxSums sums;
};

__device__ __forceinline__ void visit(RowState& st, float l, int i, const BannedTokens& ban) {
  if (ban.n && banned(ban, i)) return;
  st.top = merge(st.top, Top2{l, i, -INFINITY});
  if (l > st.sums.m) st.sums = rebase(st.sums, l);
  const float d = l - st.sums.m, e = __expf(d);
  st.sums.z += e;
  st.sums.zl += e * d;
  st.sums.z2 += e * e;
}

__device__ __forceinline__ RowState merge(const RowState& a, const RowState& b) {
  return {merge(a.top, b.top), merge(a.sums, b.sums)};
}

__device__ __forceinline__ RowState shfl_xor(const RowState& a, int o) {
  RowState r;
  r.top.best = __shfl_xor_sync(0xffffffffu, a.top.best, o);
  r.top.idx = __shfl_xor_sync(0xffffffffu, a.top.idx, o);
  r.top.second = __shfl_xor_sync(0xffffffffu, a.top.second, o);
  r.sums.m = __shfl_xor_sync(0xffffffffu, a.sums.m, o);
  r.sums.z = __shfl_xor_sync(0xffffffffu, a.sums.z, o);
  r.sums.zl = __shfl_xor_sync(0xffffffffu, a.sums.zl, o);
  r.sums.z2 = __shfl_xor_sync(0xffffffffu, a.sums.z2, o);
  return r;
}

// The sums of one row (one block of kThreads threads), in one pass over the logits (16-byte
// loads when the slice is a multiple of 4 ids, as every real vocabulary and its even splits are).
__device__ void row_sums(const float* row, int vocab, int begin, const BannedTokens& ban,
                         DeviceRowSums* out) {
  __shared__ RowState part[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  RowState st;
  if (vocab % 4 == 0) {
    const auto* row4 = reinterpret_cast<const float4*>(row);
    for (int c = threadIdx.x; c < vocab / 4; c += kThreads) {
      const float4 v = row4[c];
      const int id = begin + 4 * c;
      visit(st, v.x, id, ban);
      visit(st, v.y, id + 1, ban);
      visit(st, v.z, id + 2, ban);
      visit(st, v.w, id + 3, ban);
    }
  } else {
    for (int i = threadIdx.x; i < vocab; i += kThreads) visit(st, row[i], begin + i, ban);
  }
  for (int o = 16; o > 0; o >>= 1) st = merge(st, shfl_xor(st, o));
  if (lane == 0) part[warp] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    RowState r = part[0];
    for (int w = 1; w < kThreads / 32; ++w) r = merge(r, part[w]);
    *out = {r.top.idx, r.sums.m, r.top.second, r.sums.z, r.sums.zl, r.sums.z2};
  }
}

__global__ void __launch_bounds__(kThreads)
    greedy_sums_kernel(const float* logits, int vocab, int begin, BannedTokens ban,
                       DeviceRowSums* out) {
  ptx::wait_for_primary_grid();  // a programmatic dependent of the LM head GEMM
  row_sums(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab, begin, ban,
           out + blockIdx.x);
}

// Rows of many sequences in one launch, each with its sequence's banned list.
__global__ void __launch_bounds__(kThreads)
    greedy_sums_rows_kernel(const float* logits, int vocab, int begin, const int32_t* bans,
                            const int32_t* row_ban, DeviceRowSums* out) {
  ptx::wait_for_primary_grid();
  const int set = row_ban[blockIdx.x];
  if (set < 0) return;  // a row whose statistics come from the host, or padding
  BannedTokens ban;
  const int32_t* b = bans + set * kBannedInts;
  for (int k = 0; k < kMaxBanned; ++k) ban.ids[k] = b[k];
  ban.n = b[kMaxBanned];
  row_sums(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab, begin, ban,
           out + blockIdx.x);
}

}  // namespace

void greedy_row_sums(const float* logits, int rows, int vocab, int vocab_begin,
                     BannedTokens banned, DeviceRowSums* out, cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(greedy_sums_kernel, dim3(rows), dim3(kThreads), 0, stream, logits, vocab,
             vocab_begin, banned, out);
  DLLM_CUDA_LAUNCH_CHECK();
}

void greedy_row_sums_rows(const float* logits, int rows, int vocab, int vocab_begin,
                          const int32_t* bans, const int32_t* row_ban, DeviceRowSums* out,
                          cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(greedy_sums_rows_kernel, dim3(rows), dim3(kThreads), 0, stream, logits, vocab,
             vocab_begin, bans, row_ban, out);
  DLLM_CUDA_LAUNCH_CHECK();
}

VocabShardPartial row_sums_partial(const DeviceRowSums& d, int32_t vocab_begin) {
  VocabShardPartial p;
  p.vocab_begin = vocab_begin;
  if (!(d.sum_exp > 0)) return p;  // every id of the slice banned
  p.max_logit = d.max_logit;
  p.argmax = d.argmax;
  p.second_logit = d.second_logit;
  p.sum_exp = p.confidence_exp = p.sum_exp_tempered = d.sum_exp;
  p.sum_exp_shifted = p.sum_exp_tempered_shifted = d.sum_exp_shifted;
  p.sum_exp_sq = d.sum_exp_sq;
  return p;
}

}  // namespace dllm::cuda
