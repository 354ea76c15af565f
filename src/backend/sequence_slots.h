// Where one sequence's keys and queries live in its KV cache for one forward — the slot logic of
// the forward contract, shared by every backend.
//   kNone / kAppend: fresh K/V go right after everything visible (for kNone that is scratch past
//                    the committed length); visible = the committed range unless a slot list is
//                    given.
//   kAtSlots:        fresh K/V overwrite the given slots; those slots are seen once, as queries.
// Keys are ordered [visible cache entries | queries], the column order of custom masks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/forward_batch.h"

namespace dllm {

struct SequenceSlots {
  std::vector<int32_t> visible_slots;  // cache entries the queries see
  std::vector<int32_t> query_slots;    // where each query's fresh K/V is written
  int64_t needed_capacity = 0;         // the cache must hold this many slots
  // visible_slots == [0, n_visible) and query_slots == [n_visible, n_visible + n): keys are one
  // contiguous slot range [0, n_visible + n), so kernels need no index list.
  bool contiguous = false;
};

// Validates slot use against `cache` (which may be null for cache-less requests) and plans it.
// `index` names the request in errors.
SequenceSlots plan_sequence_slots(const SequenceForward& seq, const KvCache* cache, size_t index);

// Where the queries' fresh K/V go, without listing the visible slots (the scheduler's page
// accounting, every step): the same query_slots as plan_sequence_slots().
std::vector<int32_t> query_slots_of(const SequenceForward& seq, const KvCache* cache);

// After a forward wrote `query_slots` (query i at query_slots[i]) of `cache`: each slot's
// position, and for kAppend the new committed length. Every backend's last step of a forward.
void commit_cache_writes(const SequenceForward& seq, KvCache& cache,
                         std::span<const int32_t> query_slots);

}  // namespace dllm
