#include "backend/vocab_parallel_outputs.h"

#include <algorithm>

#include "backend/host_token_stats.h"
#include "core/error.h"
#include "decode/s2d2_verify.h"

namespace dllm {

namespace {

// One greedy row's TokenStats (and S2D2's span statistics where wanted) appended to `out` from
// the partials of its vocabulary slices.
void append_greedy_row(const SequenceForward& seq, std::span<const VocabShardPartial> slices,
                       int64_t vocab, SequenceResult& out) {
  const TokenStats& st = out.stats.emplace_back(merge_vocab_shards(slices, seq.sampler, {}));
  if (seq.want_span_stats)
    out.span_stats.push_back(greedy_span_stats(st, merged_collision(slices), vocab));
}

// Greedy rows every rank reduced on its device: the partials of each row merged.
void merge_partials(const SequenceForward& seq, std::span<SequenceResult* const> ranks,
                    int64_t vocab, SequenceResult& out) {
  std::vector<VocabShardPartial> row(ranks.size());
  out.stats.clear();
  out.span_stats.clear();
  for (size_t i = 0; i < seq.output_rows.size(); ++i) {
    for (size_t r = 0; r < ranks.size(); ++r) row[r] = ranks[r]->vocab_partials[i];
    append_greedy_row(seq, row, vocab, out);
  }
  out.vocab_partials.clear();
}

// The output rows whole: rank r's slice of row i at its ids' columns.
std::vector<float> joined_rows(size_t m, std::span<SequenceResult* const> ranks,
                               std::span<const int64_t> slice_widths, int64_t vocab) {
  std::vector<float> rows(m * static_cast<size_t>(vocab));
  int64_t begin = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const size_t w = static_cast<size_t>(slice_widths[r]);
    const std::vector<float>& slice = ranks[r]->logits;
    if (slice.size() != m * w)
      fail("tensor-parallel rank ", r, " returned ", slice.size(), " logits for ", m, " rows of ",
           w, " ids (internal error)");
    for (size_t i = 0; i < m; ++i)
      std::copy_n(slice.begin() + static_cast<std::ptrdiff_t>(i * w), w,
                  rows.begin() + static_cast<std::ptrdiff_t>(i * size_t(vocab) + size_t(begin)));
    begin += slice_widths[r];
  }
  return rows;
}

}  // namespace

void ask_ranks_for_slices(SequenceForward& rank_request) {
  if (!rank_request.verify && !rank_request.retain_logits) return;
  rank_request.want_logits = true;
  rank_request.verify.reset();
  rank_request.retain_logits = false;
}

void join_vocab_slices(const SequenceForward& seq, std::span<SequenceResult* const> ranks,
                       std::span<const int64_t> slice_widths, int64_t vocab,
                       std::vector<float>& kept) {
  SequenceResult& out = *ranks[0];
  const size_t m = seq.output_rows.size();
  if (m == 0) return;
  if (!out.vocab_partials.empty()) {
    for (size_t r = 0; r < ranks.size(); ++r)
      if (ranks[r]->vocab_partials.size() != m)
        fail("tensor-parallel rank ", r, " reduced ", ranks[r]->vocab_partials.size(), " of ", m,
             " rows (internal error)");
    merge_partials(seq, ranks, vocab, out);
    return;
  }
  if (out.logits.empty()) return;  // no outputs asked for
  std::vector<float> rows = joined_rows(m, ranks, slice_widths, vocab);
  if (seq.want_stats) out.stats = token_stats_on_host(seq, rows, vocab);
  if (seq.want_span_stats) out.span_stats = span_stats_on_host(seq, rows, out.stats, vocab);
  if (seq.verify) out.verify_rows = verify_span_rows(rows, kept, vocab, *seq.verify, seq.sampler);
  if (seq.retain_logits) kept = rows;
  out.logits = seq.want_logits ? std::move(rows) : std::vector<float>();
}

}  // namespace dllm
