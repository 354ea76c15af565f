#include "attention/sparse_prefill_patterns.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "attention/sparse_prefill_detail.h"
#include "core/error.h"

namespace dllm {

std::string to_string(PatternKind kind) {
  switch (kind) {
    case PatternKind::kDense:
      return "dense";
    case PatternKind::kAShape:
      return "a_shape";
    case PatternKind::kTriShape:
      return "tri_shape";
    case PatternKind::kVerticalSlash:
      return "vertical_and_slash";
    case PatternKind::kBlockSparse:
      return "block_sparse";
    case PatternKind::kGrid:
      return "grid_attn";
  }
  return "dense";
}

namespace sparse_detail {

int32_t limit_of(const PrefillLayout& layout, int32_t row) {
  return sparse_key_limit(row, layout.n_tokens, layout.block_size);
}

float dot(const float* a, const float* b, int d) {
  float s = 0.0f;
  for (int i = 0; i < d; ++i) s += a[i] * b[i];
  return s;
}

std::vector<float> last_query_attention(const HeadQK& qk, const PrefillLayout& layout,
                                        int32_t q_begin, int32_t q_end, int32_t key_end) {
  if (key_end < 0) key_end = q_end;
  const int32_t rows = q_end - q_begin;
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk.head_dim));
  std::vector<float> a(static_cast<size_t>(rows) * key_end, 0.0f);
  for (int32_t i = 0; i < rows; ++i) {
    const int32_t r = q_begin + i;
    const int32_t lim = std::min(limit_of(layout, r), key_end - 1);
    float* row = &a[static_cast<size_t>(i) * key_end];
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t c = 0; c <= lim; ++c) {
      row[c] = dot(qk.q + r * qk.q_stride, qk.k + c * qk.k_stride, qk.head_dim) * scale;
      mx = std::max(mx, row[c]);
    }
    float sum = 0.0f;
    for (int32_t c = 0; c <= lim; ++c) sum += (row[c] = std::exp(row[c] - mx));
    for (int32_t c = 0; c <= lim; ++c) row[c] /= sum;
  }
  return a;
}

std::vector<int32_t> top_k(const std::vector<float>& v, int32_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int32_t>(k, static_cast<int32_t>(v.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return v[static_cast<size_t>(a)] > v[static_cast<size_t>(b)] ||
           (v[static_cast<size_t>(a)] == v[static_cast<size_t>(b)] && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

void add_diagonal_block_span(SparseHeadPlan& head, const PrefillLayout& layout, int32_t covered_end,
                             int32_t last) {
  const int32_t key_end = limit_of(layout, last) + 1;
  if (covered_end < key_end) head.add_span({covered_end, key_end - covered_end, 1, 0, -1});
}

}  // namespace sparse_detail

using namespace sparse_detail;

namespace {

// One tile of rows [first, last] that attends every key the family rule allows.
void add_dense_tile(SparseHeadPlan& head, const PrefillLayout& layout, int32_t first,
                    int32_t last) {
  head.open_tile();
  for (int32_t r = first; r <= last; ++r) head.add_row(r);
  head.add_span({0, limit_of(layout, last) + 1, 1, 0, -1});
}

void add_dense_rows(SparseHeadPlan& head, const PrefillLayout& layout, int32_t begin, int32_t end) {
  for_each_row_chunk(begin, end, [&](int32_t f, int32_t l) { add_dense_tile(head, layout, f, l); });
}

// Sink keys [0, sink) and the local band of `local` keys, for a tile whose rows lie in
// [first, last] (rows added by the caller).
void add_sink_local_spans(SparseHeadPlan& head, const PrefillLayout& layout, int32_t first,
                          int32_t last, int32_t sink, int32_t local) {
  const int32_t key_end = limit_of(layout, last) + 1;
  sink = std::min(sink, key_end);
  head.add_span({0, sink, 1, 0, -1});
  const int32_t lo = std::max(sink, limit_of(layout, first) - local + 1);
  if (lo < key_end) head.add_span({lo, key_end - lo, 1, local, -1});
}

void add_a_shape_rows(SparseHeadPlan& head, const PrefillLayout& layout, int32_t begin, int32_t end,
                      int32_t sink, int32_t local) {
  for_each_row_chunk(begin, end, [&](int32_t f, int32_t l) {
    head.open_tile();
    for (int32_t r = f; r <= l; ++r) head.add_row(r);
    add_sink_local_spans(head, layout, f, l, sink, local);
  });
}

void add_vertical_slash_rows(SparseHeadPlan& head, const PrefillLayout& layout,
                             const VsIndices& idx) {
  for_each_row_chunk(0, layout.n_tokens, [&](int32_t f, int32_t l) {
    head.open_tile();
    for (int32_t r = f; r <= l; ++r) head.add_row(r);
    add_vertical_slash_spans(head, idx, f, limit_of(layout, l) + 1);
    add_diagonal_block_span(head, layout, f + kSparseKeyBlock, l);
  });
}

void add_block_sparse_rows(SparseHeadPlan& head, const PrefillLayout& layout, const HeadQK& qk,
                           int32_t top_blocks) {
  const int32_t n = layout.n_tokens, d = qk.head_dim;
  const int32_t nb = (n + kSparseKeyBlock - 1) / kSparseKeyBlock;
  auto pool = [&](const float* x, int64_t stride) {
    std::vector<float> p(static_cast<size_t>(nb) * d, 0.0f);
    for (int32_t r = 0; r < n; ++r)
      for (int i = 0; i < d; ++i)
        p[static_cast<size_t>(r / kSparseKeyBlock) * d + i] += x[r * stride + i];
    for (int32_t b = 0; b < nb; ++b) {
      const int32_t len = std::min(n, (b + 1) * kSparseKeyBlock) - b * kSparseKeyBlock;
      for (int i = 0; i < d; ++i) p[static_cast<size_t>(b) * d + i] /= static_cast<float>(len);
    }
    return p;
  };
  const std::vector<float> qp = pool(qk.q, qk.q_stride), kp = pool(qk.k, qk.k_stride);
  for (int32_t qb = 0; qb < nb; ++qb) {
    const int32_t f = qb * kSparseKeyBlock, l = std::min(n, f + kSparseKeyBlock) - 1;
    const int32_t key_blocks = (limit_of(layout, l) + kSparseKeyBlock) / kSparseKeyBlock;
    std::vector<float> score(static_cast<size_t>(key_blocks));
    for (int32_t kb = 0; kb < key_blocks; ++kb)
      score[static_cast<size_t>(kb)] =
          dot(&qp[static_cast<size_t>(qb) * d], &kp[static_cast<size_t>(kb) * d], d);
    for (int32_t kb = qb; kb < key_blocks; ++kb)  // the diagonal block(s) always
      score[static_cast<size_t>(kb)] = std::numeric_limits<float>::infinity();
    std::vector<int32_t> chosen = top_k(score, std::max(top_blocks, key_blocks - qb));
    std::sort(chosen.begin(), chosen.end());
    head.open_tile();
    for (int32_t r = f; r <= l; ++r) head.add_row(r);
    const int32_t key_end = limit_of(layout, l) + 1;
    for (size_t i = 0; i < chosen.size();) {  // adjacent blocks merge into one span
      size_t j = i + 1;
      while (j < chosen.size() && chosen[j] == chosen[j - 1] + 1) ++j;
      const int32_t b = chosen[i] * kSparseKeyBlock;
      const int32_t e = std::min(key_end, (chosen[j - 1] + 1) * kSparseKeyBlock);
      head.add_span({b, e - b, 1, 0, -1});
      i = j;
    }
  }
}

bool is_grid_row(const GridParams& g, int32_t v_begin, int32_t r) {
  return (r - v_begin) % g.stride == g.phase;
}

void add_grid_rows(SparseHeadPlan& head, const PrefillLayout& layout, const GridParams& g) {
  const int32_t vb = layout.vision_begin, ve = layout.vision_end;
  add_dense_rows(head, layout, 0, vb);
  // Vision rows outside the hline set, in order, 64 to a tile: sink (the keys before the span),
  // local band, and the vline keys outside the band (a strided span: index math, no gather).
  std::vector<int32_t> rows;
  for (int32_t r = vb; r < ve; ++r)
    if (!(g.hline && is_grid_row(g, vb, r))) rows.push_back(r);
  for (size_t i = 0; i < rows.size(); i += kSparseTileRows) {
    const size_t e = std::min(rows.size(), i + kSparseTileRows);
    const int32_t first = rows[i], last = rows[e - 1];
    head.open_tile();
    for (size_t j = i; j < e; ++j) head.add_row(rows[j]);
    add_sink_local_spans(head, layout, first, last, vb, g.local);
    if (g.vline) {
      const int32_t key_end = limit_of(layout, last) + 1;
      const int32_t first_key = vb + g.phase;
      if (first_key < key_end)
        head.add_span(
            {first_key, (key_end - first_key + g.stride - 1) / g.stride, g.stride, -g.local, -1});
    }
  }
  // hline rows: strided rows (index math) attending every key.
  if (g.hline) {
    std::vector<int32_t> hrows;
    for (int32_t r = vb + g.phase; r < ve; r += g.stride) hrows.push_back(r);
    for (size_t i = 0; i < hrows.size(); i += kSparseTileRows) {
      const size_t e = std::min(hrows.size(), i + kSparseTileRows);
      head.open_tile();
      for (size_t j = i; j < e; ++j) head.add_row(hrows[j]);
      head.add_span({0, limit_of(layout, hrows[e - 1]) + 1, 1, 0, -1});
    }
  }
  add_dense_rows(head, layout, ve, layout.n_tokens);
}

void check_layout(const PrefillLayout& layout, const HeadPattern& p) {
  if (layout.n_tokens < 1)
    fail("sparse prefill: n_tokens must be >= 1 (got ", layout.n_tokens, ")");
  if (layout.block_size < 1)
    fail("sparse prefill: block_size must be >= 1 (got ", layout.block_size, ")");
  if (p.kind == PatternKind::kGrid) {
    if (layout.vision_begin < 0 || layout.vision_end < layout.vision_begin ||
        layout.vision_end > layout.n_tokens)
      fail("sparse prefill: grid needs a vision span within [0, ", layout.n_tokens, "] (got [",
           layout.vision_begin, ", ", layout.vision_end, "))");
    if (p.grid.stride < 0 || p.grid.phase < 0 ||
        (p.grid.stride > 0 && p.grid.phase >= p.grid.stride))
      fail(
          "sparse prefill: grid stride must be >= 0 (0: searched) and phase in [0, stride) (got "
          "stride ",
          p.grid.stride, ", phase ", p.grid.phase, ")");
  }
  if (p.boundary == BoundaryKind::kQ &&
      layout.modality.size() != static_cast<size_t>(layout.n_tokens))
    fail("sparse prefill: Q- and 2D-boundary need a modality per token (got ",
         layout.modality.size(), " for ", layout.n_tokens, " tokens)");
}

}  // namespace

SparseHeadPlan plan_vertical_slash(const PrefillLayout& layout, const VsIndices& idx) {
  SparseHeadPlan head;
  add_vertical_slash_rows(head, layout, idx);
  return head;
}

std::vector<int32_t> grid_stride_space(const PrefillLayout& layout) {
  const int32_t span = layout.vision_end - layout.vision_begin;
  std::vector<int32_t> strides;
  for (int32_t s = 2; s <= std::min(1024, span / 2); ++s) strides.push_back(s);
  if (layout.frame_stride > 1024 && layout.frame_stride <= span)
    strides.push_back(layout.frame_stride);
  if (strides.empty()) strides.push_back(1);
  return strides;
}

VsIndices estimate_vertical_slash(const HeadQK& qk, const PrefillLayout& layout, int32_t q_begin,
                                  int32_t q_end, int32_t vertical, int32_t slash,
                                  int32_t init_window, int32_t local_window) {
  const std::vector<float> a = last_query_attention(qk, layout, q_begin, q_end);
  const int32_t rows = q_end - q_begin, n = q_end;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> col(static_cast<size_t>(n), 0.0f), diag(static_cast<size_t>(n), 0.0f);
  for (int32_t i = 0; i < rows; ++i)
    for (int32_t c = 0; c < n; ++c) {
      const float v = a[static_cast<size_t>(i) * n + c];
      col[static_cast<size_t>(c)] += v;
      const int32_t off = q_begin + i - c;  // diag index n - 1 - off
      if (off >= 0) diag[static_cast<size_t>(n - 1 - off)] += v;
    }
  for (int32_t c = 0; c < std::min(init_window, n); ++c) col[static_cast<size_t>(c)] = inf;
  for (int32_t o = 0; o < std::min(local_window, n); ++o)
    diag[static_cast<size_t>(n - 1 - o)] = inf;
  VsIndices idx;
  idx.verticals = top_k(col, std::min(n, std::max(vertical, 30)));
  std::sort(idx.verticals.begin(), idx.verticals.end());
  for (int32_t i : top_k(diag, std::min(n, std::max(slash, 50)))) idx.slashes.push_back(n - 1 - i);
  std::sort(idx.slashes.rbegin(), idx.slashes.rend());
  return idx;
}

void add_vertical_slash_spans(SparseHeadPlan& head, const VsIndices& idx, int32_t start_m,
                              int32_t key_end, int32_t key_map_offset,
                              const std::vector<int32_t>* key_positions) {
  const int32_t end_m = start_m + kSparseTileRows;
  // Bands: a diagonal with offset o covers columns [end_m - o - 64, end_m - o) of this block
  // (clamped to start at 0); offsets >= end_m miss it. Offsets descend, so band ends ascend. A
  // band starting within 64 of the current range's end extends the range by one 64-block
  // (MInference's merge, which can overshoot the band by < 64 columns).
  std::vector<std::pair<int32_t, int32_t>> ranges;
  for (int32_t o : idx.slashes) {
    if (o >= end_m) continue;
    const int32_t e = std::max(end_m - o, kSparseKeyBlock);
    if (ranges.empty() || e > ranges.back().second + kSparseKeyBlock)
      ranges.emplace_back(e - kSparseKeyBlock, e);
    else if (e > ranges.back().second)
      ranges.back().second += kSparseKeyBlock;
  }
  // Keys past the block's rows are visible only through a block-causal overhang, which the
  // diagonal-block rule attends; clipping there keeps the spans disjoint.
  key_end = std::min(key_end, end_m);
  auto clip = [&](int32_t c) { return std::min(c, key_end); };
  for (const auto& [b, e] : ranges)
    if (clip(b) < clip(e)) head.add_span({b, clip(e) - b, 1, 0, key_map_offset});
  // Verticals before the last range's end and outside every range become gathered columns.
  std::vector<int32_t> cols;
  const int32_t final_end = ranges.empty() ? end_m : ranges.back().second;
  size_t ri = 0;
  for (int32_t v : idx.verticals) {
    if (v >= final_end || v >= key_end) break;
    while (ri < ranges.size() && ranges[ri].second <= v) ++ri;
    if (ri < ranges.size() && v >= ranges[ri].first) continue;
    cols.push_back(key_positions ? (*key_positions)[static_cast<size_t>(v)] : v);
  }
  if (!cols.empty())
    head.add_span({0, static_cast<int32_t>(cols.size()), 1, 0, head.add_key_list(cols)});
}

GridParams estimate_grid(const HeadQK& qk, const PrefillLayout& layout,
                         std::span<const int32_t> strides, int32_t last_q, GridParams base) {
  const int32_t vb = layout.vision_begin, ve = layout.vision_end;
  const int32_t q_begin = std::max(vb, ve - last_q);
  if (ve <= vb || strides.empty())
    fail("sparse prefill: grid search needs a vision span and strides");
  const std::vector<float> a = last_query_attention(qk, layout, q_begin, ve);
  std::vector<double> mass(static_cast<size_t>(ve - vb), 0.0);
  for (int32_t i = 0; i < ve - q_begin; ++i)
    for (int32_t c = vb; c < ve; ++c)
      mass[static_cast<size_t>(c - vb)] += a[static_cast<size_t>(i) * ve + c];
  const double total = std::accumulate(mass.begin(), mass.end(), 0.0);
  std::vector<int32_t> sorted(strides.begin(), strides.end());
  std::sort(sorted.begin(), sorted.end());
  double best = -std::numeric_limits<double>::infinity();
  for (int32_t s : sorted) {
    if (s < 1) fail("sparse prefill: grid strides must be >= 1 (got ", s, ")");
    std::vector<double> fold(static_cast<size_t>(s), 0.0);
    for (size_t j = 0; j < mass.size(); ++j) fold[j % static_cast<size_t>(s)] += mass[j];
    const auto top = std::max_element(fold.begin(), fold.end());
    // The recall the best phase class gains over a random key set of the same density 1 / s:
    // multiples of a grid's stride split its mass, divisors add keys without mass.
    const double excess = total > 0 ? *top / total - 1.0 / s : 0.0;
    if (excess > best + 1e-6) {
      best = excess;
      base.stride = s;
      base.phase = static_cast<int32_t>(top - fold.begin());
    }
  }
  return base;
}

SparseHeadPlan build_head_plan(const HeadPattern& p, const PrefillLayout& layout,
                               const HeadQK& qk) {
  check_layout(layout, p);
  SparseHeadPlan head;
  const int32_t n = layout.n_tokens;
  if (p.boundary == BoundaryKind::kQ) {
    add_q_boundary_rows(head, layout, qk, p);
    return head;
  }
  if (p.boundary == BoundaryKind::k2D) {
    add_2d_boundary_rows(head, layout, qk, p);
    return head;
  }
  switch (p.kind) {
    case PatternKind::kDense:
      add_dense_rows(head, layout, 0, n);
      break;
    case PatternKind::kAShape:
      add_a_shape_rows(head, layout, 0, n, p.sink, p.local);
      break;
    case PatternKind::kTriShape: {
      // n_last < 0: MMInference's a_shape, whose dense rows are the text after the vision span.
      const int32_t n_last =
          p.n_last >= 0 ? p.n_last
                        : (layout.vision_end > layout.vision_begin ? n - layout.vision_end : 0);
      const int32_t split = std::max(0, n - n_last);
      add_a_shape_rows(head, layout, 0, split, p.sink, p.local);
      add_dense_rows(head, layout, split, n);
      break;
    }
    case PatternKind::kVerticalSlash: {
      const VsIndices idx = estimate_vertical_slash(qk, layout, std::max(0, n - p.last_q), n,
                                                    p.vertical, p.slash, 30, 100);
      add_vertical_slash_rows(head, layout, idx);
      break;
    }
    case PatternKind::kBlockSparse:
      add_block_sparse_rows(head, layout, qk, p.top_blocks);
      break;
    case PatternKind::kGrid: {
      // No vision span: the whole prompt is the span (the published code's default boundaries).
      PrefillLayout span = layout;
      if (span.vision_end <= span.vision_begin) {
        span.vision_begin = 0;
        span.vision_end = n;
      }
      GridParams g = p.grid;
      if (g.stride == 0) g = estimate_grid(qk, span, grid_stride_space(span), p.last_q, g);
      add_grid_rows(head, span, g);
      break;
    }
  }
  return head;
}

}  // namespace dllm
