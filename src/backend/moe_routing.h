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

}  // namespace dllm
