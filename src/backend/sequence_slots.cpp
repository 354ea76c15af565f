#include "backend/sequence_slots.h"

#include <algorithm>
#include <set>
#include <string>

#include "core/error.h"

namespace dllm {

SequenceSlots plan_sequence_slots(const SequenceForward& seq, const KvCache* cache, size_t index) {
  const std::string where = "forward request " + std::to_string(index) + ": ";
  SequenceSlots s;
  const int64_t length = cache ? cache->length() : 0;
  if (seq.visible_slots) {
    s.visible_slots = *seq.visible_slots;
  } else {
    for (int64_t i = 0; i < length; ++i) s.visible_slots.push_back(static_cast<int32_t>(i));
  }
  for (int32_t slot : s.visible_slots)
    if (!cache || slot >= cache->capacity() || cache->positions()[static_cast<size_t>(slot)] < 0)
      fail(where, "visible slot ", slot, " was never written");

  s.query_slots = query_slots_of(seq, cache);
  if (seq.write == CacheWrite::kAtSlots) {
    const std::set<int32_t> rewritten(seq.write_slots.begin(), seq.write_slots.end());
    std::erase_if(s.visible_slots, [&](int32_t slot) { return rewritten.count(slot) > 0; });
  }
  for (int32_t slot : s.query_slots)
    s.needed_capacity = std::max<int64_t>(s.needed_capacity, slot + 1);

  s.contiguous = true;
  for (size_t i = 0; i < s.visible_slots.size() && s.contiguous; ++i)
    s.contiguous = s.visible_slots[i] == static_cast<int32_t>(i);
  for (size_t i = 0; i < s.query_slots.size() && s.contiguous; ++i)
    s.contiguous = s.query_slots[i] == static_cast<int32_t>(s.visible_slots.size() + i);
  return s;
}

std::vector<int32_t> query_slots_of(const SequenceForward& seq, const KvCache* cache) {
  if (seq.write == CacheWrite::kAtSlots) return seq.write_slots;
  // After everything visible: the committed range, and for scratch also any listed slot past it.
  int64_t start = cache ? cache->length() : 0;
  if (seq.write == CacheWrite::kNone && seq.visible_slots)
    for (int32_t slot : *seq.visible_slots) start = std::max<int64_t>(start, slot + 1);
  std::vector<int32_t> slots(seq.tokens.size());
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int32_t>(start + int64_t(i));
  return slots;
}

void commit_cache_writes(const SequenceForward& seq, KvCache& cache,
                         std::span<const int32_t> query_slots) {
  for (size_t i = 0; i < query_slots.size(); ++i)
    cache.set_position(query_slots[i], seq.positions[i]);
  if (seq.write == CacheWrite::kAppend) {
    const int64_t committed =
        seq.append_count >= 0 ? seq.append_count : static_cast<int64_t>(seq.tokens.size());
    cache.set_length(cache.length() + committed);
  }
}

}  // namespace dllm
