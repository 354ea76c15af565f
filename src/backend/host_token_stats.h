// TokenStats of a sequence's output rows from its logits on the host (one row per thread): the
// samplers a device does not reduce (filters, sampling, LLaDA's per-entry Gumbel draws), and a
// tensor-parallel group's rows whose vocabulary slices it joined.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/forward_batch.h"

namespace dllm {

// `logits`: [seq.output_rows.size(), vocab]. Row i draws at seq.rng_positions[i], or at the
// logical position of its row.
std::vector<TokenStats> token_stats_on_host(const SequenceForward& seq,
                                            std::span<const float> logits, int64_t vocab);

}  // namespace dllm
