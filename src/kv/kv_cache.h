// KvCache: the K/V of one sequence, addressed by logical slot, stored in pages of the shared
// KvPool through a block table (logical page -> physical page). Slots [0, length) are committed;
// a forward may also write slots past length as scratch (denoising steps that must not commit) or
// rewrite chosen slots in place (d2Cache refresh, WeDLM window). Each slot remembers the logical
// position its token was encoded at, which block-causal attention needs.
//
// Bookkeeping only: the backend that owns the pool's storage reads and writes the K/V at
// physical_slot(). Pages are taken from the pool as the cache grows (reserve) and given back when
// it shrinks below them (truncate keeps them: a rollback is usually followed by new writes) or is
// destroyed.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kv/kv_pool.h"

namespace dllm {

class KvCache {
 public:
  explicit KvCache(KvPool& pool) : pool_(&pool) {}
  ~KvCache() { clear(); }
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t length() const { return length_; }
  int64_t capacity() const { return static_cast<int64_t>(positions_.size()); }
  std::span<const int32_t> positions() const { return positions_; }

  // Commit: slots [0, n) now hold final K/V. n may exceed the old length only over written slots.
  void set_length(int64_t n);
  // Roll back to the first n committed slots (n <= length).
  void truncate(int64_t n);
  // Takes pages from the pool until at least n slots exist; Error naming the pool when it is
  // exhausted (the cache is then unchanged). The scheduler checks pages_for() first.
  void reserve(int64_t n);
  // Pages reserve(n) would take from the pool.
  int64_t pages_for(int64_t n) const;
  // Records the logical position a slot's K/V was encoded at (backends call it when they write).
  void set_position(int64_t slot, int32_t pos) { positions_[static_cast<size_t>(slot)] = pos; }

  KvPool& pool() const { return *pool_; }
  int32_t page_size() const { return pool_->page_size(); }
  std::span<const int32_t> pages() const { return pages_; }
  int64_t physical_slot(int64_t slot) const {
    const int32_t ps = pool_->page_size();
    return static_cast<int64_t>(pages_[static_cast<size_t>(slot / ps)]) * ps + slot % ps;
  }

  // Before the backend writes `slots`: a page shared with another sequence is replaced by a
  // private copy (returned as (from, to) physical pages, for the backend to copy first), and a
  // published prefix page of this sequence alone is withdrawn from the prefix cache. Error when
  // the pool has no page left for a copy (nothing changed then).
  std::vector<std::pair<int32_t, int32_t>> prepare_writes(std::span<const int32_t> slots);
  // Pages prepare_writes(slots) would take from the pool.
  int64_t copy_pages_for(std::span<const int32_t> slots) const;

  // Maps already written pages (prefix-cache hits, each retained for this cache) as the first
  // logical pages of an empty cache, committing their slots at positions 0, 1, ...
  void adopt_prefix(std::span<const int32_t> pages);

  // Gives every page back to the pool; the cache is empty afterwards.
  void clear();

 private:
  KvPool* pool_;
  std::vector<int32_t> pages_;
  std::vector<int32_t> positions_;  // per logical slot; -1: never written
  int64_t length_ = 0;
};

}  // namespace dllm
