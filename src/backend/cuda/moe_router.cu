// LLaDA2.x MoE router (kernels.h moe_route): one warp per token, each lane holding the experts
// lane, lane + 32, ... The rule and its tie-breaking are the CPU reference's
// (backend/moe_routing.cpp): experts ordered by biased score, ties to the lower index; a group's
// score is the sum of its two best; the top groups are kept; the top-k kept experts in rank order;
// weights normalised in that order.
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl_launch.h"
#include "core/error.h"

namespace dllm::cuda {

namespace {

constexpr int kMaxExperts = 512, kMaxGroups = 64, kMaxTopK = 32;
constexpr int kSlots = kMaxExperts / 32;  // experts a lane holds
constexpr int kRouteWarps = 4;            // tokens a block

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// a ranks before b: larger value, or equal value and lower index (the CPU reference's order).
__device__ __forceinline__ bool before(float va, int a, float vb, int b) {
  return va > vb || (va == vb && a < b);
}

// Two best of a set under before(): (b, s) indices, -1 where none.
struct Top2 {
  float bv = 0.0f, sv = 0.0f;
  int b = -1, s = -1;

  __device__ __forceinline__ void offer(float v, int x) {
    if (b < 0 || before(v, x, bv, b)) {
      sv = bv;
      s = b;
      bv = v;
      b = x;
    } else if (s < 0 || before(v, x, sv, s)) {
      sv = v;
      s = x;
    }
  }
  __device__ __forceinline__ void merge(const Top2& o) {  // disjoint sets
    if (o.b >= 0) offer(o.bv, o.b);
    if (o.s >= 0) offer(o.sv, o.s);
  }
};

__device__ __forceinline__ Top2 shfl_xor(const Top2& t, int off) {
  Top2 o;
  o.bv = __shfl_xor_sync(0xffffffffu, t.bv, off);
  o.sv = __shfl_xor_sync(0xffffffffu, t.sv, off);
  o.b = __shfl_xor_sync(0xffffffffu, t.b, off);
  o.s = __shfl_xor_sync(0xffffffffu, t.s, off);
  return o;
}

// The sum of each group's two best biased scores into scores[g]. Up to 32 groups, an aligned run
// of `lanes` = 32 / groups (a power of two) lanes shares a group, each scanning a slice of it,
// and the runs merge their two-best by shuffles; past 32, a lane takes groups lane, lane + 32.
__device__ __forceinline__ void group_scores(const MoeRouteParams& p, const float* biased,
                                             float* scores, int lane) {
  const int per_group = p.experts / p.groups;
  int lanes = 1;
  while (lanes * 2 * p.groups <= 32) lanes *= 2;
  for (int g0 = 0; g0 < p.groups; g0 += 32 / lanes) {  // (one pass unless groups > 32)
    const int g = g0 + lane / lanes, part = lane % lanes;
    const int slice = (per_group + lanes - 1) / lanes;
    Top2 t;
    if (g < p.groups) {
      const int begin = g * per_group + part * slice;
      const int end = min((g + 1) * per_group, begin + slice);
      for (int x = begin; x < end; ++x) t.offer(biased[x], x);
    }
    for (int off = 1; off < lanes; off <<= 1) t.merge(shfl_xor(t, off));
    if (g < p.groups && part == 0) scores[g] = t.bv + t.sv;
  }
  __syncwarp();
}

// Bit g set: group g is kept (fewer than groups_per_token groups rank before it). Lane l ranks
// groups l and l + 32.
__device__ __forceinline__ uint64_t kept_groups(const MoeRouteParams& p, const float* scores,
                                                int lane) {
  uint64_t kept = 0;
  for (int h = 0; h < kMaxGroups / 32; ++h) {
    const int g = lane + 32 * h;
    int rank = 0;
    if (g < p.groups)
      for (int o = 0; o < p.groups; ++o) rank += before(scores[o], o, scores[g], g);
    kept |=
        static_cast<uint64_t>(__ballot_sync(0xffffffffu, g < p.groups && rank < p.groups_per_token))
        << (32 * h);
  }
  return kept;
}

// The top_k kept experts in rank order, one selection round each: every lane offers its best
// expert not yet taken (from its registers), the warp agrees on the best offer (lane 0's result,
// so that even NaN scores, which break the order, leave one answer). Lane j returns the j-th (0
// where no expert was left, as a valid index).
__device__ __forceinline__ int choose_experts(const MoeRouteParams& p, const float* biased,
                                              uint64_t kept, int lane) {
  const int per_group = p.experts / p.groups;
  float v[kSlots];
  uint32_t open = 0;  // bit s: the lane's expert s * 32 + lane is a candidate not yet taken
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int x = s * 32 + lane;
    v[s] = x < p.experts ? biased[x] : 0.0f;
    if (x < p.experts && (kept >> (x / per_group) & 1)) open |= 1u << s;
  }
  int mine = 0;
  for (int j = 0; j < p.top_k; ++j) {
    float bv = 0.0f;
    int bx = INT_MAX;  // none
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int x = s * 32 + lane;
      if ((open >> s & 1) && (bx == INT_MAX || before(v[s], x, bv, bx))) {
        bv = v[s];
        bx = x;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int ox = __shfl_xor_sync(0xffffffffu, bx, off);
      if (ox != INT_MAX && (bx == INT_MAX || before(ov, ox, bv, bx))) {
        bv = ov;
        bx = ox;
      }
    }
    bx = __shfl_sync(0xffffffffu, bx, 0);
    if (bx != INT_MAX && bx % 32 == lane) open &= ~(1u << (bx / 32));
    if (lane == j) mine = bx == INT_MAX ? 0 : bx;
  }
  return mine;
}

// Blocks of kRouteWarps warps, a token each: scores, kept groups, the top-k selection, weights.
// A router step is one dependent chain a token (a decoding step routes 32 tokens on 8 SMs), so
// each stage keeps its chain short: group maxima by lane runs, the selection from registers, the
// weights' sum by shuffles.
__global__ void moe_route_kernel(MoeRouteParams p) {
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  __shared__ float biased_all[kRouteWarps][kMaxExperts];
  __shared__ float score_all[kRouteWarps][kMaxExperts];
  __shared__ float group_all[kRouteWarps][kMaxGroups];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= p.n) return;  // (the block never synchronises as a whole)
  float* biased = biased_all[warp];
  float* score = score_all[warp];
  const float* logits = p.logits + static_cast<int64_t>(t) * p.experts;
  for (int x = lane; x < p.experts; x += 32) {
    score[x] = sigmoid(logits[x]);
    biased[x] = score[x] + (p.expert_bias ? p.expert_bias[x] : 0.0f);
  }
  __syncwarp();
  group_scores(p, biased, group_all[warp], lane);
  const uint64_t kept = kept_groups(p, group_all[warp], lane);
  const int mine = choose_experts(p, biased, kept, lane);
  const float s = score[mine];
  float total = 0.0f;  // in rank order, as the reference
  for (int j = 0; j < p.top_k; ++j) total += __shfl_sync(0xffffffffu, s, j);
  if (lane < p.top_k) {
    p.experts_out[static_cast<int64_t>(t) * p.top_k + lane] = mine;
    p.weights_out[static_cast<int64_t>(t) * p.top_k + lane] =
        (p.top_k > 1 ? s / (total + 1e-20f) : s) * p.scaling;
  }
}

}  // namespace

void moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.experts < 2 || p.experts > kMaxExperts || p.groups < 1 || p.groups > kMaxGroups ||
      p.experts % p.groups != 0 || p.experts / p.groups < 2 || p.groups_per_token < 1 ||
      p.groups_per_token > p.groups || p.top_k < 1 || p.top_k > kMaxTopK ||
      p.top_k > p.groups_per_token * (p.experts / p.groups))
    fail("moe_route: unsupported routing shape (experts ", p.experts, ", groups ", p.groups,
         ", groups per token ", p.groups_per_token, ", top_k ", p.top_k,
         "); the CUDA router handles up to ", kMaxExperts, " experts, ", kMaxGroups,
         " groups and top ", kMaxTopK);
  if (p.n == 0) return;
  const unsigned blocks = static_cast<unsigned>((p.n + kRouteWarps - 1) / kRouteWarps);
  launch_pdl(moe_route_kernel, dim3(blocks), dim3(kRouteWarps * 32), 0, stream, p);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
