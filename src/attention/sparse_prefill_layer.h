// One layer of an MMInference sparse prefill, as both backends run it (cpu_sparse_prefill.cpp,
// cuda_sparse_prefill.cpp): every query head's pattern from the request's config, the prompt
// layout clipped to the forward's tokens, and the plan of every head built from this layer's
// queries and keys (online estimation on the host, fp32).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/sparse_prefill_config.h"
#include "attention/sparse_prefill_patterns.h"
#include "attention/sparse_prefill_plan.h"

namespace dllm {

// Every query head's pattern of `layer` (SparsePrefillConfig::pattern()).
std::vector<HeadPattern> layer_patterns(const SparsePrefillRequest& request, int layer, int heads);

// Whether every head attends densely (the layer then runs the backend's ordinary attention).
bool all_dense(const std::vector<HeadPattern>& patterns);

// Whether building the pattern's plan reads the layer's queries and keys (online estimation:
// vertical-slash, block-sparse, a grid of stride 0, the boundary forms).
bool reads_qk(const HeadPattern& pattern);

// The request's layout for a forward of its first n tokens (a block family prefills a prefix of
// the prompt: the modality map and the vision span are clipped to it).
PrefillLayout prefill_layout(const SparsePrefillRequest& request, int32_t n, int32_t block_size);

// The plan of every head. q: [n, heads, head_dim], k: [n, kv_heads, head_dim] fp32 (token-major);
// both may be null when no pattern reads_qk().
SparsePrefillPlan build_layer_plan(const std::vector<HeadPattern>& patterns,
                                   const PrefillLayout& layout, const float* q, const float* k,
                                   int kv_heads, int head_dim);

}  // namespace dllm
