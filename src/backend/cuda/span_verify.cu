// S2D2's span verification on the device (SpanVerify, forward_batch.h): for each verified row,
// q(x) and p(x) under softmax(logits / T) of the verifier's row and of the kept draft row, and a
// draw from norm((q - p)+) — q itself when that mass is 0 — by inverse CDF in id order, the
// semantics of the host's residual_sample. One block per row; the walk is a chunked block scan.
// Sums are fp32 here and double on the host, so a draw can differ from the host's only when u·Z
// lies within rounding of a cumulative boundary. Top-k/top-p samplers stay on the host (the
// backend copies the rows back for them).
#include <cfloat>
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace dllm::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ bool banned(const BannedTokens& b, int v) {
  for (int i = 0; i < b.n; ++i)
    if (b.ids[i] == v) return true;
  return false;
}

// Block-wide reductions (every thread gets the result). `scratch` holds kWarps values.
template <class T, class Op>
__device__ T block_reduce(T v, T* scratch, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by the previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, scratch[w]);
  return r;
}

// Exclusive prefix sum over the block's threads, in thread order.
__device__ float block_exclusive_scan(float v, float* warp_sums) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const float other = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += other;
  }
  __syncthreads();
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  float base = 0.0f;
  for (int w = 0; w < warp; ++w) base += warp_sums[w];
  return base + incl - v;
}

__global__ void __launch_bounds__(kThreads) span_verify_kernel(SpanVerifyParams p) {
  __shared__ float fred[kWarps];
  __shared__ int ired[kWarps];
  const int row = blockIdx.x;
  const float* ql = p.q_logits + static_cast<int64_t>(row) * p.vocab;
  const float* pl = p.kept_logits + static_cast<int64_t>(p.draft_rows[row]) * p.vocab;
  const float it = p.inv_temperature;
  auto fmax_op = [](float a, float b) { return fmaxf(a, b); };
  auto fsum_op = [](float a, float b) { return a + b; };

  float mq = -FLT_MAX, mp = -FLT_MAX;
  for (int v = threadIdx.x; v < p.vocab; v += kThreads) {
    if (banned(p.banned, v)) continue;
    mq = fmaxf(mq, ql[v] * it);
    mp = fmaxf(mp, pl[v] * it);
  }
  mq = block_reduce(mq, fred, fmax_op);
  mp = block_reduce(mp, fred, fmax_op);
  float zq = 0.0f, zp = 0.0f;
  for (int v = threadIdx.x; v < p.vocab; v += kThreads) {
    if (banned(p.banned, v)) continue;
    zq += __expf(ql[v] * it - mq);
    zp += __expf(pl[v] * it - mp);
  }
  const float izq = 1.0f / block_reduce(zq, fred, fsum_op);
  const float izp = 1.0f / block_reduce(zp, fred, fsum_op);
  auto q_of = [&](int v) { return banned(p.banned, v) ? 0.0f : __expf(ql[v] * it - mq) * izq; };
  auto p_of = [&](int v) { return banned(p.banned, v) ? 0.0f : __expf(pl[v] * it - mp) * izp; };

  float zr = 0.0f, qsum = 0.0f;
  for (int v = threadIdx.x; v < p.vocab; v += kThreads) {
    const float q = q_of(v);
    zr += fmaxf(q - p_of(v), 0.0f);
    qsum += q;
  }
  zr = block_reduce(zr, fred, fsum_op);
  qsum = block_reduce(qsum, fred, fsum_op);
  const bool use_q = !(zr > 0.0f);
  const float target = p.u[row] * (use_q ? qsum : zr);
  auto w_of = [&](int v) { return use_q ? q_of(v) : fmaxf(q_of(v) - p_of(v), 0.0f); };

  // Each thread owns a contiguous chunk of ids; the chunk where the cumulative mass first exceeds
  // the target is walked id by id.
  const int chunk = (p.vocab + kThreads - 1) / kThreads;
  const int begin = min(p.vocab, static_cast<int>(threadIdx.x) * chunk);
  const int end = min(p.vocab, begin + chunk);
  float s = 0.0f;
  int last_positive = -1;
  for (int v = begin; v < end; ++v) {
    const float w = w_of(v);
    if (w > 0.0f) {
      s += w;
      last_positive = v;
    }
  }
  const float prefix = block_exclusive_scan(s, fred);
  int found = INT_MAX;
  if (s > 0.0f && !(prefix > target) && prefix + s > target) {
    float cum = prefix;
    for (int v = begin; v < end; ++v) {
      const float w = w_of(v);
      if (!(w > 0.0f)) continue;
      cum += w;
      if (cum > target) {
        found = v;
        break;
      }
    }
  }
  found = block_reduce(found, ired, [](int a, int b) { return min(a, b); });
  last_positive = block_reduce(last_positive, ired, [](int a, int b) { return max(a, b); });
  if (threadIdx.x == 0) {
    const int x = p.tokens[row];
    DeviceVerifyRow out;
    out.q_token = q_of(x);
    out.p_token = p_of(x);
    out.residual_token = found != INT_MAX ? found : max(last_positive, 0);  // u within rounding of 1
    p.out[row] = out;
  }
}

}  // namespace

void span_verify(const SpanVerifyParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  span_verify_kernel<<<p.rows, kThreads, 0, stream>>>(p);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
