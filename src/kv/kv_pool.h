// KvPool: the K/V memory of every sequence, as fixed-size pages sized once at start-up (vLLM's
// block manager, llama.cpp's unified KV cache). This class keeps the bookkeeping only — which
// pages are free, who references them, which hold a known prompt prefix; the backend that created
// the pool owns the storage, laid out by physical slot = page * page_size + offset.
//
// Prefix sharing: a page whose K/V are a pure function of a token prefix (a prompt prefix under
// causal or block-causal attention) can be published under a hash of that prefix. A later
// sequence with the same prefix maps the page into its own table instead of recomputing it. Pages
// nobody references but that hold a published prefix stay cached and are evicted least recently
// used first, only when a fresh page is needed.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace dllm {

class KvPool {
 public:
  KvPool(int64_t num_pages, int32_t page_size);
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  int64_t num_pages() const { return static_cast<int64_t>(refs_.size()); }
  int32_t page_size() const { return page_size_; }
  int64_t num_slots() const { return num_pages() * page_size_; }

  // Pages a sequence may still take: free ones plus cached prefix pages nobody references.
  int64_t available_pages() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  // Pages referenced by at least one sequence.
  int64_t used_pages() const { return num_pages() - available_pages(); }
  // Cached prefix pages nobody references (part of available_pages()).
  int64_t cached_pages() const { return static_cast<int64_t>(lru_.size()); }

  // A fresh page with one reference, or nothing when the pool is exhausted. Evicts the least
  // recently used cached prefix page when no page is free.
  std::optional<int32_t> allocate();
  void retain(int32_t page);
  // Drops one reference; a page nobody references becomes free (or cached, if published).
  void release(int32_t page);
  int32_t references(int32_t page) const { return refs_.at(static_cast<size_t>(page)); }

  // Publishes `page` (fully written) as holding the prefix identified by `hash`. A page already
  // published under another hash is republished; a hash already taken keeps its first page.
  void publish(int32_t page, uint64_t hash);
  // Whether the page holds a published prefix (its K/V must not change while it does).
  bool published(int32_t page) const { return hash_of_[static_cast<size_t>(page)].has_value(); }
  // Withdraws a page's prefix before its contents change (a write into the only owner's page).
  void unpublish(int32_t page);
  // The page published under `hash`, with one more reference, or nothing.
  std::optional<int32_t> lookup(uint64_t hash);

  // Prefix-cache counters (engine statistics).
  int64_t prefix_hits() const { return hits_; }
  int64_t prefix_lookups() const { return lookups_; }

 private:
  int32_t page_size_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // a stack: the most recently freed page is reused first
  // Cached prefix pages nobody references, least recently used first, and where each sits.
  std::list<int32_t> lru_;
  std::vector<std::list<int32_t>::iterator> lru_at_;
  std::vector<std::optional<uint64_t>> hash_of_;
  std::unordered_map<uint64_t, int32_t> page_of_;
  int64_t hits_ = 0, lookups_ = 0;
};

}  // namespace dllm
