#include "attention/sparse_prefill_layer.h"

#include <algorithm>
#include <exception>

#include "core/error.h"
#include "core/thread_pool.h"

namespace dllm {

std::vector<HeadPattern> layer_patterns(const SparsePrefillRequest& request, int layer, int heads) {
  std::vector<HeadPattern> patterns;
  patterns.reserve(static_cast<size_t>(heads));
  for (int h = 0; h < heads; ++h) patterns.push_back(request.config->pattern(layer, h));
  return patterns;
}

bool all_dense(const std::vector<HeadPattern>& patterns) {
  return std::all_of(patterns.begin(), patterns.end(), [](const HeadPattern& p) {
    return p.kind == PatternKind::kDense && p.boundary == BoundaryKind::kNone;
  });
}

bool reads_qk(const HeadPattern& p) {
  if (p.boundary != BoundaryKind::kNone) return true;
  switch (p.kind) {
    case PatternKind::kVerticalSlash:
    case PatternKind::kBlockSparse:
      return true;
    case PatternKind::kGrid:
      return p.grid.stride == 0;
    case PatternKind::kDense:
    case PatternKind::kAShape:
    case PatternKind::kTriShape:
      return false;
  }
  return true;
}

PrefillLayout prefill_layout(const SparsePrefillRequest& request, int32_t n, int32_t block_size) {
  PrefillLayout layout;
  layout.n_tokens = n;
  layout.block_size = block_size;
  layout.modality = request.modality;  // the prompt's: clipped to this forward's tokens
  layout.modality.resize(static_cast<size_t>(n), 0);
  layout.vision_end = std::min(request.vision_end, n);
  layout.vision_begin = std::min(request.vision_begin, layout.vision_end);
  layout.frame_stride = request.frame_stride;
  return layout;
}

SparsePrefillPlan build_layer_plan(const std::vector<HeadPattern>& patterns,
                                   const PrefillLayout& layout, const float* q, const float* k,
                                   int kv_heads, int head_dim) {
  const int heads = static_cast<int>(patterns.size());
  if (kv_heads < 1 || heads % kv_heads != 0)
    fail("sparse prefill: ", heads, " query heads are not a multiple of ", kv_heads, " KV heads");
  const int64_t qd = int64_t{heads} * head_dim, kvd = int64_t{kv_heads} * head_dim;
  for (int h = 0; h < heads; ++h)
    if (reads_qk(patterns[static_cast<size_t>(h)]) && (!q || !k))
      fail("sparse prefill: head ", h, "'s pattern needs the layer's queries and keys");
  SparsePrefillPlan plan;
  plan.n_tokens = layout.n_tokens;
  plan.block_size = layout.block_size;
  plan.heads.resize(static_cast<size_t>(heads));
  // Heads are independent (the online estimates cost O(last_q x n x d) each): one per thread.
  // A head's plan does not depend on which thread builds it. Errors are rethrown on the caller.
  std::vector<std::exception_ptr> errors(static_cast<size_t>(heads));
  parallel_for(heads, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      const HeadPattern& p = patterns[static_cast<size_t>(h)];
      HeadQK qk{nullptr, nullptr, qd, kvd, head_dim};
      if (reads_qk(p)) {
        qk.q = q + h * head_dim;
        qk.k = k + h / (heads / kv_heads) * head_dim;
      }
      try {
        plan.heads[static_cast<size_t>(h)] = build_head_plan(p, layout, qk);
      } catch (...) {
        errors[static_cast<size_t>(h)] = std::current_exception();
      }
    }
  });
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return plan;
}

}  // namespace dllm
