// dLLM-Cache's per-layer row rule (method-specs §6.3, the d2Cache repository's port
// src/cache/dllm_cache.py), shared by both backends' forwards: which canvas rows a layer
// recomputes; the others keep their cached attention and FFN outputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/forward_batch.h"

namespace dllm {

struct ReuseRows {
  std::vector<int32_t> rows;  // recomputed for sure, ascending
  // The response rows are chosen afterwards by value similarity (least_similar_rows): neither
  // refresh flag holds for them and rho > 0.
  bool by_similarity = false;
};

// The prompt rows when the prompt refreshes, the response rows when the response refreshes; the
// first forward over an empty cache and layer 0 (whose input is the current tokens' embedding)
// refresh both.
ReuseRows reuse_rows(const DllmCacheStep& step, int64_t rows, bool first, int64_t layer);

// The int(G * rho) response rows whose new V is least cosine-similar to the cached one (ties: the
// lower row), ascending, as canvas rows (`sim[g]` is response row first_row + g's similarity).
std::vector<int32_t> least_similar_rows(std::span<const double> sim, double rho,
                                        int32_t first_row);

}  // namespace dllm
