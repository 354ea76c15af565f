// The CPU forward's outputs: final norm and LM head on the wanted rows only, TokenStats, and
// S2D2's draft rows (kept in the sequence's method state) and span verification.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"
#include "core/thread_pool.h"
#include "decode/s2d2_policy.h"
#include "decode/s2d2_verify.h"

namespace dllm::cpu_backend {

void CpuBackend::compute_outputs(const SequenceForward& seq, const float* x,
                                 SequenceResult& result) const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  const float eps = static_cast<float>(c.norm_eps);
  const cpu::WeightMatrix& head = tied_ ? embed_ : lm_head_;
  const int64_t m = static_cast<int64_t>(seq.output_rows.size());
  if (m == 0 || !(seq.want_logits || seq.want_stats || seq.retain_logits || seq.verify)) return;
  std::vector<float>& rows = scratch_.head_rows;
  rows.resize(static_cast<size_t>(m * h));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = seq.output_rows[static_cast<size_t>(i)];
    cpu::rms_norm(&x[static_cast<size_t>(r * h)], h, final_norm_.ptr(),
                  &rows[static_cast<size_t>(i * h)], h, 1, h, eps);
  }
  // Logits stay in scratch unless the caller wants them.
  std::vector<float>& logits = seq.want_logits ? result.logits : scratch_.logits;
  logits.resize(static_cast<size_t>(m * c.vocab_size));
  cpu::matmul_nt(rows.data(), h, head, logits.data(), c.vocab_size, m);
  if (seq.want_stats) {
    auto& stats = result.stats;
    stats.resize(static_cast<size_t>(m));
    // A row's statistics are a softmax (exp, log in double) over the vocabulary: a thread pays
    // from ~8K entries per chunk (a 4-row step of the embedded model splits 2 + 2; 8 requests of
    // it: 943-952 -> 1024 tokens/s on 2 cores, docs/benchmarks.md issue 25).
    const int64_t rows_per_thread = std::max<int64_t>(1, (int64_t{1} << 13) / c.vocab_size);
    parallel_for(
        m,
        [&](int64_t first, int64_t last) {
          for (int64_t i = first; i < last; ++i) {
            const size_t row = static_cast<size_t>(seq.output_rows[static_cast<size_t>(i)]);
            const int32_t pos = seq.rng_positions.empty()
                                    ? seq.positions[row]
                                    : seq.rng_positions[static_cast<size_t>(i)];
            const auto row_logits = std::span<const float>(logits).subspan(
                static_cast<size_t>(i * c.vocab_size), static_cast<size_t>(c.vocab_size));
            stats[static_cast<size_t>(i)] =
                compute_token_stats(row_logits, seq.sampler, seq.rng, pos);
          }
        },
        rows_per_thread);
  }
  if (seq.want_span_stats)
    result.span_stats = span_stats_on_host(seq, logits, result.stats, c.vocab_size);
  if (seq.retain_logits || seq.verify) {
    auto& state = static_cast<CpuMethodState&>(*seq.state);
    if (seq.verify)
      result.verify_rows =
          verify_span_rows(logits, state.kept_logits, c.vocab_size, *seq.verify, seq.sampler);
    if (seq.retain_logits) state.kept_logits = logits;
  }
}

}  // namespace dllm::cpu_backend
