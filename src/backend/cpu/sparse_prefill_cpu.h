// The fp32 CPU executor of a sparse prefill plan (attention/sparse_prefill_plan.h): the reference
// the CUDA kernel is checked against, and the CPU backend's prefill path.
#pragma once

#include <cstdint>

#include "attention/sparse_prefill_plan.h"

namespace dllm {

// q, out: [n_tokens, heads, head_dim]; k, v: [n_tokens, kv_heads, head_dim] (token-major, the
// forward's layout); heads a multiple of kv_heads (GQA: query head h reads KV head
// h / (heads / kv_heads)). Softmax scale 1 / sqrt(head_dim). plan.heads.size() == heads.
void sparse_prefill_attention_cpu(const SparsePrefillPlan& plan, const float* q, const float* k,
                                  const float* v, int heads, int kv_heads, int head_dim,
                                  float* out);

}  // namespace dllm
