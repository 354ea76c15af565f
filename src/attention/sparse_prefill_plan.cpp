#include "attention/sparse_prefill_plan.h"

#include "core/error.h"

namespace dllm {

QueryTile& SparseHeadPlan::open_tile() {
  QueryTile t;
  t.first_row = static_cast<int32_t>(rows.size());
  t.first_span = static_cast<int32_t>(spans.size());
  tiles.push_back(t);
  return tiles.back();
}

void SparseHeadPlan::add_row(int32_t row) {
  rows.push_back(row);
  ++tiles.back().row_count;
}

void SparseHeadPlan::add_span(const KeySpan& span) {
  if (span.count <= 0) return;
  spans.push_back(span);
  ++tiles.back().span_count;
}

int32_t SparseHeadPlan::add_key_list(const std::vector<int32_t>& keys) {
  const auto offset = static_cast<int32_t>(key_map.size());
  key_map.insert(key_map.end(), keys.begin(), keys.end());
  return offset;
}

std::vector<uint8_t> plan_mask(const SparsePrefillPlan& plan, int head) {
  const int64_t n = plan.n_tokens;
  const SparseHeadPlan& h = plan.heads.at(static_cast<size_t>(head));
  std::vector<uint8_t> mask(static_cast<size_t>(n * n), 0);
  std::vector<uint8_t> row_seen(static_cast<size_t>(n), 0);
  for (size_t t = 0; t < h.tiles.size(); ++t) {
    const QueryTile& tile = h.tiles[t];
    if (tile.row_count < 1 || tile.row_count > kSparseTileRows)
      fail("sparse prefill plan: head ", head, " tile ", t, " has ", tile.row_count, " rows (1..",
           kSparseTileRows, ")");
    for (int32_t i = 0; i < tile.row_count; ++i) {
      const int32_t r = h.rows.at(static_cast<size_t>(tile.first_row + i));
      if (r < 0 || r >= n) fail("sparse prefill plan: head ", head, " row ", r, " out of range");
      if (row_seen[static_cast<size_t>(r)]++)
        fail("sparse prefill plan: head ", head, " row ", r, " in two tiles");
      const int32_t lim = sparse_key_limit(r, plan.n_tokens, plan.block_size);
      uint8_t* m = &mask[static_cast<size_t>(r * n)];
      for (int32_t s = 0; s < tile.span_count; ++s) {
        const KeySpan& span = h.spans.at(static_cast<size_t>(tile.first_span + s));
        for (int32_t k = 0; k < span.count; ++k) {
          const int32_t c = span_key(h, span, k);
          if (c < 0 || c >= n)
            fail("sparse prefill plan: head ", head, " key ", c, " out of range [0, ", n, ")");
          if (!span_admits(span, c, lim)) continue;
          if (m[c]++)
            fail("sparse prefill plan: head ", head, " row ", r, " attends key ", c, " twice");
        }
      }
    }
  }
  for (int64_t r = 0; r < n; ++r)
    if (!row_seen[static_cast<size_t>(r)])
      fail("sparse prefill plan: head ", head, " row ", r, " in no tile");
  return mask;
}

double plan_density(const SparsePrefillPlan& plan) {
  double attended = 0, family = 0;
  for (const SparseHeadPlan& h : plan.heads)
    for (const QueryTile& tile : h.tiles)
      for (int32_t i = 0; i < tile.row_count; ++i) {
        const int32_t r = h.rows[static_cast<size_t>(tile.first_row + i)];
        const int32_t lim = sparse_key_limit(r, plan.n_tokens, plan.block_size);
        family += lim + 1;
        for (int32_t s = 0; s < tile.span_count; ++s) {
          const KeySpan& span = h.spans[static_cast<size_t>(tile.first_span + s)];
          for (int32_t k = 0; k < span.count; ++k)
            attended += span_admits(span, span_key(h, span, k), lim) ? 1 : 0;
        }
      }
  return family > 0 ? attended / family : 0.0;
}

}  // namespace dllm
