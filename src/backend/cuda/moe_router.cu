// LLaDA2.x MoE router (kernels.h moe_route): one block per token, one thread per expert. The
// rule and its tie-breaking are the CPU reference's (backend/moe_routing.cpp): experts ordered by
// biased score, ties to the lower index; a group's score is the sum of its two best; the top
// groups are kept; the top-k kept experts in rank order; weights normalised in that order.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl_launch.h"
#include "core/error.h"

namespace dllm::cuda {

namespace {

constexpr int kMaxExperts = 512, kMaxGroups = 64, kMaxTopK = 32;

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// a ranks before b: larger value, or equal value and lower index (the CPU reference's order).
__device__ __forceinline__ bool before(float va, int a, float vb, int b) {
  return va > vb || (va == vb && a < b);
}

// Blocks of roundup(experts, 32) threads. Each kept expert finds its rank among the kept ones by
// counting those before it (a strict total order, so the ranks are distinct): the chosen are
// ranks 0..top_k-1, with no serial top-k loop (one thread per token took ~0.3 ms a layer).
__global__ void moe_route_kernel(MoeRouteParams p) {
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  __shared__ float biased[kMaxExperts];
  __shared__ bool kept[kMaxExperts];
  __shared__ float group_score[kMaxGroups];
  __shared__ int chosen[kMaxTopK];
  const int t = blockIdx.x, e = threadIdx.x;
  const float* logits = p.logits + static_cast<int64_t>(t) * p.experts;
  const int per_group = p.experts / p.groups;
  if (e < p.experts) biased[e] = sigmoid(logits[e]) + (p.expert_bias ? p.expert_bias[e] : 0.0f);
  if (e < p.top_k) chosen[e] = 0;  // a valid expert even if NaN scores leave a rank unfilled
  __syncthreads();
  if (e < p.groups) {  // the sum of the group's two best biased scores
    int best = -1, second = -1;
    for (int x = e * per_group; x < (e + 1) * per_group; ++x) {
      if (best < 0 || before(biased[x], x, biased[best], best)) {
        second = best;
        best = x;
      } else if (second < 0 || before(biased[x], x, biased[second], second)) {
        second = x;
      }
    }
    group_score[e] = biased[best] + biased[second];
  }
  __syncthreads();
  if (e < p.experts) {  // a group is kept when fewer than groups_per_token groups rank before it
    const int g = e / per_group;
    int rank = 0;
    for (int o = 0; o < p.groups; ++o) rank += before(group_score[o], o, group_score[g], g);
    kept[e] = rank < p.groups_per_token;
  }
  __syncthreads();
  if (e < p.experts && kept[e]) {
    const float v = biased[e];
    int rank = 0;
    for (int o = 0; o < p.experts; ++o) rank += kept[o] && before(biased[o], o, v, e);
    if (rank < p.top_k) chosen[rank] = e;
  }
  __syncthreads();
  if (e == 0) {
    float total = 0.0f;
    for (int j = 0; j < p.top_k; ++j) total += sigmoid(logits[chosen[j]]);
    for (int j = 0; j < p.top_k; ++j) {
      const float s = sigmoid(logits[chosen[j]]);
      p.experts_out[static_cast<int64_t>(t) * p.top_k + j] = chosen[j];
      p.weights_out[static_cast<int64_t>(t) * p.top_k + j] =
          (p.top_k > 1 ? s / (total + 1e-20f) : s) * p.scaling;
    }
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
  const int threads = (p.experts + 31) / 32 * 32;
  launch_pdl(moe_route_kernel, dim3(p.n), dim3(threads), 0, stream, p);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
