// The Q- and 2D-boundary forms of MMInference (method-specs §2.6; sparse_prefill_patterns.h says
// what they attend): modality-aware vertical-slash over the prompt's modality map.
#include <algorithm>
#include <limits>

#include "attention/sparse_prefill_detail.h"
#include "core/error.h"

namespace dllm {
namespace sparse_detail {

namespace {

// The last span [begin, end) of every modality present (index: the modality value).
struct LastSpans {
  std::vector<int32_t> begin = std::vector<int32_t>(256, -1), end = std::vector<int32_t>(256, -1);
};

LastSpans last_spans(const PrefillLayout& layout) {
  LastSpans out;
  const auto& mod = layout.modality;
  for (int32_t r = 0; r < layout.n_tokens;) {
    int32_t e = r;
    while (e < layout.n_tokens && mod[static_cast<size_t>(e)] == mod[static_cast<size_t>(r)]) ++e;
    out.begin[mod[static_cast<size_t>(r)]] = r;
    out.end[mod[static_cast<size_t>(r)]] = e;
    r = e;
  }
  return out;
}

// 2D-boundary: rows and keys grouped by modality (positions of each modality ascending: the
// permuted layout, addressed through the key map). Per query modality mq: VS over its own keys
// in compacted coordinates (estimated from its last <= 64 queries), and for every other modality
// mk the top `vertical` keys of mk those queries attend (no slashes across modalities).
struct ModalityPositions {
  std::vector<std::vector<int32_t>> pos = std::vector<std::vector<int32_t>>(256);
};

ModalityPositions modality_positions(const PrefillLayout& layout) {
  ModalityPositions m;
  for (int32_t r = 0; r < layout.n_tokens; ++r)
    m.pos[layout.modality[static_cast<size_t>(r)]].push_back(r);
  return m;
}

// Keys of `keys` (ascending positions) with position <= lim: the compacted key limit.
int32_t compacted_end(const std::vector<int32_t>& keys, int32_t lim) {
  return static_cast<int32_t>(std::upper_bound(keys.begin(), keys.end(), lim) - keys.begin());
}

struct PairIndices {
  VsIndices intra;                              // compacted coordinates of the modality
  std::vector<std::vector<int32_t>> verticals;  // [mk] key positions, ascending
};

PairIndices estimate_2d(const HeadQK& qk, const PrefillLayout& layout, const ModalityPositions& mp,
                        int mq, const HeadPattern& p) {
  const std::vector<int32_t>& rows = mp.pos[static_cast<size_t>(mq)];
  const int32_t nq = static_cast<int32_t>(rows.size());
  const int32_t first = std::max(0, nq - 64);
  const int32_t n_c = compacted_end(rows, limit_of(layout, rows.back()));
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> col(static_cast<size_t>(n_c), 0.0f), diag(static_cast<size_t>(n_c), 0.0f);
  std::vector<std::vector<float>> cross(256);
  for (int32_t i = first; i < nq; ++i) {
    const int32_t r = rows[static_cast<size_t>(i)];
    const std::vector<float> a =
        last_query_attention(qk, layout, r, r + 1, limit_of(layout, r) + 1);
    for (int32_t c = 0; c < static_cast<int32_t>(a.size()); ++c) {
      const int m = layout.modality[static_cast<size_t>(c)];
      const auto& keys = mp.pos[static_cast<size_t>(m)];
      const int32_t j =
          static_cast<int32_t>(std::lower_bound(keys.begin(), keys.end(), c) - keys.begin());
      if (m == mq) {
        col[static_cast<size_t>(j)] += a[static_cast<size_t>(c)];
        if (i - j >= 0) diag[static_cast<size_t>(n_c - 1 - (i - j))] += a[static_cast<size_t>(c)];
      } else {
        auto& v = cross[static_cast<size_t>(m)];
        if (v.size() < keys.size()) v.resize(keys.size(), 0.0f);
        v[static_cast<size_t>(j)] += a[static_cast<size_t>(c)];
      }
    }
  }
  for (int32_t c = 0; c < std::min(30, n_c); ++c) col[static_cast<size_t>(c)] = inf;
  for (int32_t o = 0; o < std::min(100, n_c); ++o) diag[static_cast<size_t>(n_c - 1 - o)] = inf;
  PairIndices out;
  out.intra.verticals = top_k(col, std::min(n_c, std::max(p.vertical, 30)));
  std::sort(out.intra.verticals.begin(), out.intra.verticals.end());
  for (int32_t i : top_k(diag, std::min(n_c, std::max(p.slash, 50))))
    out.intra.slashes.push_back(n_c - 1 - i);
  std::sort(out.intra.slashes.rbegin(), out.intra.slashes.rend());
  out.verticals.resize(256);
  for (size_t m = 0; m < 256; ++m) {
    const auto& keys = mp.pos[m];
    std::vector<float> v = cross[m];
    v.resize(static_cast<size_t>(compacted_end(keys, limit_of(layout, rows.back()))), 0.0f);
    for (int32_t j : top_k(v, std::min<int32_t>(static_cast<int32_t>(v.size()), p.vertical)))
      out.verticals[m].push_back(keys[static_cast<size_t>(j)]);
    std::sort(out.verticals[m].begin(), out.verticals[m].end());
  }
  return out;
}

}  // namespace

// Q-boundary: per original 64-row block, one tile per modality present, with that modality's
// indices converted for the block.
void add_q_boundary_tiles(SparseHeadPlan& head, const PrefillLayout& layout,
                          const std::vector<VsIndices>& idx) {
  const auto& mod = layout.modality;
  for_each_row_chunk(0, layout.n_tokens, [&](int32_t f, int32_t l) {
    for (int m = 0; m < 256; ++m) {
      int32_t last = -1;
      for (int32_t r = f; r <= l; ++r)
        if (mod[static_cast<size_t>(r)] == m) last = r;
      if (last < 0) continue;
      head.open_tile();
      for (int32_t r = f; r <= l; ++r)
        if (mod[static_cast<size_t>(r)] == m) head.add_row(r);
      add_vertical_slash_spans(head, idx.at(static_cast<size_t>(m)), f, limit_of(layout, last) + 1);
      add_diagonal_block_span(head, layout, f + kSparseKeyBlock, last);
    }
  });
}

// Q-boundary: per modality, VS indices from the last <= 64 queries of its last span.
void add_q_boundary_rows(SparseHeadPlan& head, const PrefillLayout& layout, const HeadQK& qk,
                         const HeadPattern& p) {
  const LastSpans spans = last_spans(layout);
  std::vector<VsIndices> idx(256);
  for (size_t m = 0; m < 256; ++m) {
    if (spans.end[m] < 0) continue;
    const int32_t b = std::max(spans.begin[m], spans.end[m] - 64);
    idx[m] = estimate_vertical_slash(qk, layout, b, spans.end[m], p.vertical, p.slash, 30, 100);
  }
  add_q_boundary_tiles(head, layout, idx);
}

void add_2d_boundary_rows(SparseHeadPlan& head, const PrefillLayout& layout, const HeadQK& qk,
                          const HeadPattern& p) {
  const ModalityPositions mp = modality_positions(layout);
  for (int mq = 0; mq < 256; ++mq) {
    const std::vector<int32_t>& rows = mp.pos[static_cast<size_t>(mq)];
    if (rows.empty()) continue;
    const PairIndices idx = estimate_2d(qk, layout, mp, mq, p);
    const int32_t map = head.add_key_list(rows);
    const int32_t nq = static_cast<int32_t>(rows.size());
    for (int32_t t = 0; t < nq; t += kSparseTileRows) {
      const int32_t last_i = std::min(nq, t + kSparseTileRows) - 1;
      const int32_t last = rows[static_cast<size_t>(last_i)];
      const int32_t lim = limit_of(layout, last);
      head.open_tile();
      for (int32_t i = t; i <= last_i; ++i) head.add_row(rows[static_cast<size_t>(i)]);
      const int32_t key_end = compacted_end(rows, lim);
      add_vertical_slash_spans(head, idx.intra, t, key_end, map, &rows);
      if (t + kSparseKeyBlock < key_end)  // the diagonal-block rule, in compacted keys
        head.add_span({t + kSparseKeyBlock, key_end - t - kSparseKeyBlock, 1, 0, map});
      for (size_t mk = 0; mk < 256; ++mk) {
        if (static_cast<int>(mk) == mq) continue;
        std::vector<int32_t> cols;
        for (int32_t c : idx.verticals[mk])
          if (c <= lim) cols.push_back(c);
        if (!cols.empty())
          head.add_span({0, static_cast<int32_t>(cols.size()), 1, 0, head.add_key_list(cols)});
      }
    }
  }
}

}  // namespace sparse_detail

SparseHeadPlan plan_q_boundary(const PrefillLayout& layout, const std::vector<VsIndices>& idx) {
  if (layout.modality.size() != static_cast<size_t>(layout.n_tokens))
    fail("sparse prefill: Q-boundary needs a modality per token (got ", layout.modality.size(),
         " for ", layout.n_tokens, " tokens)");
  SparseHeadPlan head;
  sparse_detail::add_q_boundary_tiles(head, layout, idx);
  return head;
}

}  // namespace dllm
