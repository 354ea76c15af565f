// The outputs of a vocabulary-parallel group (issue 27): each rank's LM head holds the rows of one
// id range (Model::shard), so a rank's result carries, per output row, either the partial its
// device reduced from its slice (greedy rows: a few numbers, vocab_parallel_stats.h) or its slice
// of the logits (rows the host finishes: sampling with filters, S2D2's draft rows and
// verification, requested logits — rows a single device copies to the host as well). The
// group turns them into one device's result here.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/forward_batch.h"

namespace dllm {

// What a rank is asked for a sequence: S2D2 keeps and verifies whole rows, so where the caller
// keeps or verifies draft rows the ranks give their logits slices instead (the group keeps the
// whole rows in its own method state).
void ask_ranks_for_slices(SequenceForward& rank_request);

// One sequence's result from every rank's (ranks[r]: rank r, ascending vocabulary ranges of
// `slice_widths` ids, together `vocab`) into *ranks[0], which carries what else the forward
// returns: TokenStats and span statistics merged from the partials, or from whole rows joined
// from the slices — then verification against `kept` and, with retain_logits, kept = the rows.
void join_vocab_slices(const SequenceForward& seq, std::span<SequenceResult* const> ranks,
                       std::span<const int64_t> slice_widths, int64_t vocab,
                       std::vector<float>& kept);

}  // namespace dllm
