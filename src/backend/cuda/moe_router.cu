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

// The sum of group g's two best biased scores.
__device__ __forceinline__ float group_score(const float* biased, int g, int per_group) {
  int best = -1, second = -1;
  for (int x = g * per_group; x < (g + 1) * per_group; ++x) {
    if (best < 0 || before(biased[x], x, biased[best], best)) {
      second = best;
      best = x;
    } else if (second < 0 || before(biased[x], x, biased[second], second)) {
      second = x;
    }
  }
  return biased[best] + biased[second];
}

// Bit g set: group g is kept (fewer than groups_per_token groups rank before it). Lane l scores
// groups l and l + 32.
__device__ __forceinline__ uint64_t kept_groups(const MoeRouteParams& p, const float* biased,
                                                float* scores, int lane) {
  const int per_group = p.experts / p.groups;
  for (int g = lane; g < p.groups; g += 32) scores[g] = group_score(biased, g, per_group);
  __syncwarp();
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
// expert not yet taken, the warp agrees on the best offer (lane 0's result, so that even NaN
// scores, which break the order, leave one answer). Lane j returns the j-th (0 where no expert
// was left, as a valid index).
__device__ __forceinline__ int choose_experts(const MoeRouteParams& p, const float* biased,
                                              uint64_t kept, int lane) {
  const int per_group = p.experts / p.groups;
  uint32_t open = 0;  // bit s: the lane's expert s * 32 + lane is a candidate not yet taken
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int x = s * 32 + lane;
    if (x < p.experts && (kept >> (x / per_group) & 1)) open |= 1u << s;
  }
  int mine = 0;
  for (int j = 0; j < p.top_k; ++j) {
    float bv = 0.0f;
    int bx = INT_MAX;  // none
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int x = s * 32 + lane;
      if ((open >> s & 1) && (bx == INT_MAX || before(biased[x], x, bv, bx))) {
        bv = biased[x];
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
// Per token O(experts x top_k / 32) steps a lane (counting every kept expert's rank took
// O(experts^2) a block: ~1.2 ms a 128-request LLaDA2-mini step).
__global__ void moe_route_kernel(MoeRouteParams p) {
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  __shared__ float biased_all[kRouteWarps][kMaxExperts];
  __shared__ float group_all[kRouteWarps][kMaxGroups];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= p.n) return;  // (the block never synchronises as a whole)
  float* biased = biased_all[warp];
  const float* logits = p.logits + static_cast<int64_t>(t) * p.experts;
  for (int x = lane; x < p.experts; x += 32)
    biased[x] = sigmoid(logits[x]) + (p.expert_bias ? p.expert_bias[x] : 0.0f);
  __syncwarp();
  const uint64_t kept = kept_groups(p, biased, group_all[warp], lane);
  const int mine = choose_experts(p, biased, kept, lane);
  float total = 0.0f;  // in rank order, as the reference
  for (int j = 0; j < p.top_k; ++j) total += sigmoid(logits[__shfl_sync(0xffffffffu, mine, j)]);
  if (lane < p.top_k) {
    const float s = sigmoid(logits[mine]);
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
