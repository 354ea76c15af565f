#include "backend/host_token_stats.h"

#include "core/thread_pool.h"

namespace dllm {

std::vector<TokenStats> token_stats_on_host(const SequenceForward& seq,
                                            std::span<const float> logits, int64_t vocab) {
  const int64_t m = static_cast<int64_t>(seq.output_rows.size());
  std::vector<TokenStats> stats(static_cast<size_t>(m));
  parallel_for(m, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const size_t row = static_cast<size_t>(seq.output_rows[static_cast<size_t>(i)]);
      const int32_t pos = seq.rng_positions.empty() ? seq.positions[row]
                                                    : seq.rng_positions[static_cast<size_t>(i)];
      stats[static_cast<size_t>(i)] = compute_token_stats(
          logits.subspan(static_cast<size_t>(i * vocab), static_cast<size_t>(vocab)), seq.sampler,
          seq.rng, pos);
    }
  });
  return stats;
}

}  // namespace dllm
