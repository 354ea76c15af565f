// Mixture-of-experts routing of LLaDA2.x (LLaDA2MoeGate, model-specs §6.3), as plain host code: the
// CPU forward uses it, the CUDA router kernel is tested against it.
//   s  = sigmoid(router logits)                       (fp32)
//   sr = s + expert_bias                              (the bias steers the selection only)
//   group score = sum of the two largest sr of each group; keep the topk_group best groups
//   experts = the top-k sr among the kept groups
//   weight  = s[e] / (sum of the chosen s + 1e-20) (when k > 1) x routed_scaling_factor
// Ties break toward the lower group / expert index (torch.topk leaves them unspecified), so that
// every backend and the reference pick the same experts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/forward_batch.h"
#include "model/model_config.h"

namespace dllm {

struct MoeRouting {
  int64_t experts_per_token = 0;
  // [tokens * experts_per_token], per token in selection order (best routing score first).
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

// Routes `tokens` rows of router logits ([tokens, num_experts], fp32); `expert_bias` is empty or
// num_experts long.
MoeRouting route_experts(const MoeConfig& moe, std::span<const float> router_logits, int64_t tokens,
                         std::span<const float> expert_bias);

// The closest call of one token's routing: the smallest relative gap between the last group kept
// and the best one dropped, or between the last expert chosen and the best candidate left (+inf
// where a cut keeps everything). Two correct runs of a forward (bf16 against fp32 activations,
// other summation orders) may route a token differently only where this gap is small.
double closest_routing_gap(const MoeConfig& moe, std::span<const float> logits,
                           std::span<const float> expert_bias);

// A forward's routing as tests compare it (SequenceForward::want_routing): per routed token in
// order, its experts in increasing id and its closest_routing_gap.
struct MoeRoutingReport {
  std::vector<int32_t> experts;  // [tokens, experts_per_token]
  std::vector<double> gaps;      // [tokens]

  // Appends a token: its router logits and the k experts it was routed to.
  void add_token(const MoeConfig& moe, std::span<const float> logits,
                 std::span<const float> expert_bias, const int32_t* chosen);
  // Appends tokens [first, first + count) to a sequence's result (routed_experts, routing_gaps).
  void give(int64_t first, int64_t count, SequenceResult& result) const;
};

}  // namespace dllm
