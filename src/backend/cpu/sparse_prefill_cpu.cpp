#include "backend/cpu/sparse_prefill_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace dllm {

namespace {

// One row: softmax over the keys its tile's spans admit, then the weighted sum of V.
void attend_row(const SparseHeadPlan& hp, const QueryTile& tile, int32_t r,
                const SparsePrefillPlan& plan, const float* qrow, const float* k, const float* v,
                int64_t kv_stride, int head_dim, float scale, std::vector<int32_t>& keys,
                std::vector<float>& scores, float* orow) {
  const int32_t lim = sparse_key_limit(r, plan.n_tokens, plan.block_size);
  keys.clear();
  scores.clear();
  float mx = -std::numeric_limits<float>::infinity();
  for (int32_t s = 0; s < tile.span_count; ++s) {
    const KeySpan& span = hp.spans[static_cast<size_t>(tile.first_span + s)];
    for (int32_t i = 0; i < span.count; ++i) {
      const int32_t c = span_key(hp, span, i);
      if (!span_admits(span, c, lim)) continue;
      const float* krow = k + c * kv_stride;
      float dot = 0.0f;
      for (int d = 0; d < head_dim; ++d) dot += qrow[d] * krow[d];
      keys.push_back(c);
      scores.push_back(dot * scale);
      mx = std::max(mx, dot * scale);
    }
  }
  std::fill(orow, orow + head_dim, 0.0f);
  if (keys.empty()) return;  // a row that sees nothing: zeros (as the CUDA kernels)
  float sum = 0.0f;
  for (float& x : scores) sum += (x = std::exp(x - mx));
  for (size_t j = 0; j < keys.size(); ++j) {
    const float w = scores[j] / sum;
    const float* vrow = v + keys[j] * kv_stride;
    for (int d = 0; d < head_dim; ++d) orow[d] += w * vrow[d];
  }
}

}  // namespace

void sparse_prefill_attention_cpu(const SparsePrefillPlan& plan, const float* q, const float* k,
                                  const float* v, int heads, int kv_heads, int head_dim,
                                  float* out) {
  if (kv_heads < 1 || heads % kv_heads != 0)
    fail("sparse prefill: heads (", heads, ") must be a multiple of kv_heads (", kv_heads, ")");
  if (static_cast<int>(plan.heads.size()) != heads)
    fail("sparse prefill: the plan has ", plan.heads.size(), " heads, the call ", heads);
  const int group = heads / kv_heads;
  const int64_t q_stride = static_cast<int64_t>(heads) * head_dim;
  const int64_t kv_stride = static_cast<int64_t>(kv_heads) * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
#pragma omp parallel for schedule(dynamic)
  for (int h = 0; h < heads; ++h) {
    const SparseHeadPlan& hp = plan.heads[static_cast<size_t>(h)];
    const float* kh = k + static_cast<int64_t>(h / group) * head_dim;
    const float* vh = v + static_cast<int64_t>(h / group) * head_dim;
    std::vector<int32_t> keys;
    std::vector<float> scores;
    for (const QueryTile& tile : hp.tiles)
      for (int32_t i = 0; i < tile.row_count; ++i) {
        const int32_t r = hp.rows[static_cast<size_t>(tile.first_row + i)];
        attend_row(hp, tile, r, plan, q + r * q_stride + static_cast<int64_t>(h) * head_dim, kh, vh,
                   kv_stride, head_dim, scale, keys, scores,
                   out + r * q_stride + static_cast<int64_t>(h) * head_dim);
      }
  }
}

}  // namespace dllm
