// The CPU forward's outputs: final norm and LM head on the wanted rows only, TokenStats, and
// S2D2's draft rows (kept in the sequence's method state) and span verification.
//
// The output rows of several sequences go through one LM-head GEMM and one parallel loop of token
// statistics: a row's bits do not depend on the rows beside it (gemm_f32.h), and eight 4-row
// requests then wake the threads twice instead of sixteen times, with 6-row register tiles
// instead of 4-row ones (docs/benchmarks.md, issue 18).
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"
#include "core/thread_pool.h"
#include "decode/s2d2_policy.h"
#include "decode/s2d2_verify.h"

namespace dllm::cpu_backend {
namespace {

// Logits of at most this many bytes are computed at once (one sequence's rows always together):
// a batch of long full-diffusion canvases must not hold every canvas's logits at the same time.
constexpr int64_t kLogitsGroupBytes = int64_t{64} << 20;

bool wants_outputs(const SequenceForward& seq) {
  return !seq.output_rows.empty() &&
         (seq.want_logits || seq.want_stats || seq.retain_logits || seq.verify);
}

}  // namespace

void CpuBackend::compute_outputs(std::span<const SequenceForward> batch,
                                 std::span<const SequenceRun> runs, const float* x,
                                 std::vector<SequenceResult>& results) const {
  const int64_t vocab_bytes = head_rows_ * static_cast<int64_t>(sizeof(float));
  size_t first = 0;
  while (first < batch.size()) {
    size_t last = first;
    int64_t rows = 0;
    while (last < batch.size()) {
      const int64_t more = static_cast<int64_t>(batch[last].output_rows.size());
      if (last > first && (rows + more) * vocab_bytes > kLogitsGroupBytes) break;
      rows += wants_outputs(batch[last]) ? more : 0;
      ++last;
    }
    compute_group_outputs(batch.subspan(first, last - first), runs.subspan(first, last - first), x,
                          std::span(results).subspan(first, last - first));
    first = last;
  }
}

void CpuBackend::compute_group_outputs(std::span<const SequenceForward> batch,
                                       std::span<const SequenceRun> runs, const float* x,
                                       std::span<SequenceResult> results) const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, vocab = head_rows_;
  const float eps = static_cast<float>(c.norm_eps);
  const cpu::WeightMatrix& head = tied_ ? embed_ : lm_head_;
  // Output row j of the group: sequence owner[j], its output row index[j].
  std::vector<size_t> owner, index;
  std::vector<int64_t> first_row(batch.size());
  for (size_t si = 0; si < batch.size(); ++si) {
    first_row[si] = static_cast<int64_t>(owner.size());
    if (!wants_outputs(batch[si])) continue;
    for (size_t i = 0; i < batch[si].output_rows.size(); ++i) {
      owner.push_back(si);
      index.push_back(i);
    }
  }
  const int64_t m = static_cast<int64_t>(owner.size());
  if (m == 0) return;
  std::vector<float>& rows = scratch_.head_rows;
  rows.resize(static_cast<size_t>(m * h));
  for (int64_t j = 0; j < m; ++j) {
    const size_t si = owner[static_cast<size_t>(j)];
    const int64_t r = runs[si].row_offset + batch[si].output_rows[index[static_cast<size_t>(j)]];
    std::copy_n(x + r * h, h, &rows[static_cast<size_t>(j * h)]);
  }
  cpu::rms_norm(rows.data(), h, final_norm_.ptr(), rows.data(), h, m, h, eps);
  std::vector<float>& logits = scratch_.logits;
  logits.resize(static_cast<size_t>(m * vocab));
  cpu::matmul_nt(rows.data(), h, head, logits.data(), vocab, m);
  if (vocab_slice_) {  // a rank of a vocabulary-parallel group: its slices, merged by the group
    for (size_t si = 0; si < batch.size(); ++si)
      if (wants_outputs(batch[si]))
        results[si].logits.assign(
            logits.begin() + first_row[si] * vocab,
            logits.begin() + (first_row[si] + int64_t(batch[si].output_rows.size())) * vocab);
    return;
  }

  for (size_t si = 0; si < batch.size(); ++si)
    if (batch[si].want_stats && wants_outputs(batch[si]))
      results[si].stats.resize(batch[si].output_rows.size());
  // A row's statistics are a softmax (exp, log in double) over the vocabulary: a thread pays
  // from ~8K entries per chunk (a 4-row step of the embedded model splits 2 + 2).
  const int64_t rows_per_thread = std::max<int64_t>(1, (int64_t{1} << 13) / vocab);
  parallel_for(
      m,
      [&](int64_t first, int64_t last) {
        for (int64_t j = first; j < last; ++j) {
          const size_t si = owner[static_cast<size_t>(j)], i = index[static_cast<size_t>(j)];
          const SequenceForward& seq = batch[si];
          if (!seq.want_stats) continue;
          const size_t row = static_cast<size_t>(seq.output_rows[i]);
          const int32_t pos = seq.rng_positions.empty() ? seq.positions[row] : seq.rng_positions[i];
          const auto row_logits = std::span<const float>(logits).subspan(
              static_cast<size_t>(j * vocab), static_cast<size_t>(vocab));
          results[si].stats[i] = compute_token_stats(row_logits, seq.sampler, seq.rng, pos);
        }
      },
      rows_per_thread);

  for (size_t si = 0; si < batch.size(); ++si) {
    const SequenceForward& seq = batch[si];
    if (!wants_outputs(seq)) continue;
    SequenceResult& result = results[si];
    const auto seq_logits = std::span<const float>(logits).subspan(
        static_cast<size_t>(first_row[si] * vocab), seq.output_rows.size() * vocab);
    if (seq.want_logits) result.logits.assign(seq_logits.begin(), seq_logits.end());
    if (seq.want_span_stats)
      result.span_stats = span_stats_on_host(seq, seq_logits, result.stats, c.vocab_size);
    if (seq.retain_logits || seq.verify) {
      auto& state = static_cast<CpuMethodState&>(*seq.state);
      if (seq.verify)
        result.verify_rows =
            verify_span_rows(seq_logits, state.kept_logits, c.vocab_size, *seq.verify, seq.sampler);
      if (seq.retain_logits) state.kept_logits.assign(seq_logits.begin(), seq_logits.end());
    }
  }
}

}  // namespace dllm::cpu_backend
