// LLaDA2.x MoE router (kernels.h moe_route): one thread per token. The work per token is a few
// thousand comparisons (256 experts, top 8 of 4 of 8 groups), far below the GEMMs around it; the
// plain per-token loop keeps the rule and its tie-breaking visibly the CPU reference's.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
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

__global__ void moe_route_kernel(MoeRouteParams p) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.n) return;
  const float* logits = p.logits + static_cast<int64_t>(t) * p.experts;
  const int per_group = p.experts / p.groups;
  float biased[kMaxExperts];
  for (int e = 0; e < p.experts; ++e)
    biased[e] = sigmoid(logits[e]) + (p.expert_bias ? p.expert_bias[e] : 0.0f);
  // Group scores: the sum of each group's two best biased scores.
  float group_score[kMaxGroups];
  for (int g = 0; g < p.groups; ++g) {
    int best = -1, second = -1;
    for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
      if (best < 0 || before(biased[e], e, biased[best], best)) {
        second = best;
        best = e;
      } else if (second < 0 || before(biased[e], e, biased[second], second)) {
        second = e;
      }
    }
    group_score[g] = biased[best] + biased[second];
  }
  uint64_t kept = 0;  // bit g: group g may be routed to
  for (int i = 0; i < p.groups_per_token; ++i) {
    int best = -1;
    for (int g = 0; g < p.groups; ++g)
      if (!(kept >> g & 1) && (best < 0 || before(group_score[g], g, group_score[best], best)))
        best = g;
    kept |= uint64_t{1} << best;
  }
  int chosen[kMaxTopK];
  float total = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    int best = -1;
    for (int e = 0; e < p.experts; ++e) {
      if (!(kept >> (e / per_group) & 1)) continue;
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || chosen[i] == e;
      if (!taken && (best < 0 || before(biased[e], e, biased[best], best))) best = e;
    }
    chosen[j] = best;
    total += sigmoid(logits[best]);
  }
  for (int j = 0; j < p.top_k; ++j) {
    const float s = sigmoid(logits[chosen[j]]);
    p.experts_out[static_cast<int64_t>(t) * p.top_k + j] = chosen[j];
    p.weights_out[static_cast<int64_t>(t) * p.top_k + j] =
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
  constexpr int kThreads = 128;
  moe_route_kernel<<<(p.n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(p);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
