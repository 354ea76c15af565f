#include "attention/sparse_prefill_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace dllm {

namespace {

HeadPattern grid_pattern(int32_t stride, bool hline) {
  HeadPattern p;
  p.kind = PatternKind::kGrid;
  p.grid = {stride, 0, hline, true, 1024};
  return p;
}

// Evenly spaced rows of [begin, end), at most `count`.
std::vector<int32_t> sample_rows(int32_t begin, int32_t end, int32_t count) {
  std::vector<int32_t> rows;
  const int64_t n = end - begin;
  if (n <= count) {
    for (int32_t r = begin; r < end; ++r) rows.push_back(r);
    return rows;
  }
  for (int32_t i = 0; i < count; ++i)
    rows.push_back(begin + static_cast<int32_t>((2 * i + 1) * n / (2 * count)));
  return rows;
}

// The candidate's phases to try: the published {0, 1, stride - 1} for grid heads with a fixed
// stride; the estimated phase for searched ones; nothing to vary otherwise.
std::vector<int32_t> phases_of(const HeadPattern& p) {
  if (p.kind != PatternKind::kGrid || p.grid.stride <= 1) return {p.grid.phase};
  std::vector<int32_t> ph = {0, 1, p.grid.stride - 1};
  std::sort(ph.begin(), ph.end());
  ph.erase(std::unique(ph.begin(), ph.end()), ph.end());
  return ph;
}

}  // namespace

std::vector<SearchCandidate> published_search_space(int32_t frame_stride) {
  std::vector<SearchCandidate> c;
  auto add_grid = [&](int32_t stride, const char* what) {
    if (stride == 0 && std::string(what) == "frame") return;
    if (stride < 0) return;
    c.push_back({"grid_attn_" + std::string(what) + "_" + std::to_string(stride) + "_vline",
                 grid_pattern(stride, false)});
    c.push_back({"grid_attn_" + std::string(what) + "_" + std::to_string(stride) + "_hline_vline",
                 grid_pattern(stride, true)});
  };
  add_grid(frame_stride, "frame");
  HeadPattern a;
  a.kind = PatternKind::kAShape;
  a.sink = 128;
  a.local = 4096;
  c.push_back({"a_shape_128_4096", a});
  add_grid(0, "searched");  // stride and phase estimated online (estimate_grid)
  for (int32_t slash : {1024, 2048}) {
    HeadPattern vs;
    vs.kind = PatternKind::kVerticalSlash;
    vs.vertical = 1000;
    vs.slash = slash;
    vs.last_q = 257;
    c.push_back({"vs_attn_1000_" + std::to_string(slash) + "_257", vs});
  }
  return c;
}

std::pair<double, double> plan_recall(const SparseHeadPlan& plan, const HeadQK& qk,
                                      const PrefillLayout& layout,
                                      const std::vector<int32_t>& rows) {
  const int32_t n = layout.n_tokens;
  std::vector<int32_t> tile_of(static_cast<size_t>(n), -1);
  for (size_t t = 0; t < plan.tiles.size(); ++t)
    for (int32_t i = 0; i < plan.tiles[t].row_count; ++i)
      tile_of[static_cast<size_t>(plan.rows[static_cast<size_t>(plan.tiles[t].first_row + i)])] =
          static_cast<int32_t>(t);
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk.head_dim));
  double recall = 0, attended = 0, family = 0;
  std::vector<double> p;
  for (int32_t r : rows) {
    const int32_t lim = sparse_key_limit(r, n, layout.block_size);
    p.assign(static_cast<size_t>(lim + 1), 0.0);
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int32_t c = 0; c <= lim; ++c) {
      double dot = 0;
      for (int i = 0; i < qk.head_dim; ++i)
        dot += double(qk.q[r * qk.q_stride + i]) * qk.k[c * qk.k_stride + i];
      p[static_cast<size_t>(c)] = dot * scale;
      mx = std::max(mx, p[static_cast<size_t>(c)]);
    }
    for (double& x : p) sum += (x = std::exp(x - mx));
    const QueryTile& tile = plan.tiles.at(static_cast<size_t>(tile_of[static_cast<size_t>(r)]));
    double kept = 0;
    for (int32_t s = 0; s < tile.span_count; ++s) {
      const KeySpan& span = plan.spans[static_cast<size_t>(tile.first_span + s)];
      for (int32_t i = 0; i < span.count; ++i) {
        const int32_t c = span_key(plan, span, i);
        if (!span_admits(span, c, lim)) continue;
        kept += p[static_cast<size_t>(c)];
        attended += 1;
      }
    }
    recall += kept / sum;
    family += lim + 1;
  }
  return {rows.empty() ? 1.0 : recall / static_cast<double>(rows.size()),
          family > 0 ? attended / family : 1.0};
}

HeadSearchResult search_head_pattern(const HeadQK& qk, const PrefillLayout& layout,
                                     const std::vector<SearchCandidate>& candidates,
                                     const SearchOptions& options) {
  if (options.sample_rows < 1)
    fail("pattern search: sample_rows must be >= 1 (got ", options.sample_rows, ")");
  if (!(options.max_density > 0 && options.max_density <= 1))
    fail("pattern search: max_density must be in (0, 1] (got ", options.max_density, ")");
  const bool vision = layout.vision_end > layout.vision_begin;
  const std::vector<int32_t> rows =
      sample_rows(vision ? layout.vision_begin : 0, vision ? layout.vision_end : layout.n_tokens,
                  options.sample_rows);
  HeadSearchResult result;
  result.best = HeadPattern{};
  double best_recall = 0;
  bool found = false;
  for (const SearchCandidate& cand : candidates) {
    CandidateScore best_phase{cand.label, cand.pattern, -1, 1, true};
    for (int32_t phase : phases_of(cand.pattern)) {
      HeadPattern p = cand.pattern;
      p.grid.phase = phase;
      const auto [recall, density] = plan_recall(build_head_plan(p, layout, qk), qk, layout, rows);
      if (density > options.max_density) continue;
      if (recall > best_phase.recall) best_phase = {cand.label, p, recall, density, false};
    }
    if (best_phase.over_budget) best_phase.recall = 0;
    result.scores.push_back(best_phase);
    if (!best_phase.over_budget && best_phase.recall - best_recall > options.min_gain) {
      best_recall = best_phase.recall;
      result.best = best_phase.pattern;
      result.label = best_phase.label;
      result.recall = best_phase.recall;
      result.density = best_phase.density;
      found = true;
    }
  }
  if (!found) {  // nothing fits the budget: the head stays dense
    result.best = HeadPattern{};
    result.label = "dense";
  }
  return result;
}

}  // namespace dllm
