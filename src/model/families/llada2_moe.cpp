// LLaDA2.0 / 2.1 (inclusionAI, BailingMoeV2 MoE): recognised so users get a clear message; the
// MoE forward (fused QKV, partial RoPE, grouped sigmoid router) is a later issue. model-specs §6.
#include "model/families/family.h"

namespace dllm {

const Family kLlada2MoeFamily{
    .name = "llada2_moe",
    .description = "LLaDA2.x block diffusion (BailingMoeV2 mixture of experts)",
    .model_types = {"llada2_moe"},
    .architectures = {"LLaDA2MoeModelLM"},
    .unsupported =
        "LLaDA2.x (llada2_moe, BailingMoeV2 mixture-of-experts) checkpoints are not supported yet",
    .parse_config = nullptr,
    .global_tensor = nullptr,
    .layer_tensor = nullptr,
};

}  // namespace dllm
