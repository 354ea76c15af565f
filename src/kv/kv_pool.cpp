#include "kv/kv_pool.h"

#include "core/error.h"

namespace dllm {

namespace {
// The page count, once the pool's shape is known to be valid (before anything is allocated).
size_t checked_pages(int64_t num_pages, int32_t page_size) {
  if (num_pages <= 0 || num_pages > (int64_t{1} << 31) - 1)
    fail("KV pool: ", num_pages, " pages (expected 1 to 2^31 - 1)");
  if (page_size <= 0 || (page_size & (page_size - 1)) != 0 || page_size > 1024)
    fail("KV pool: page size ", page_size, " (expected a power of two from 1 to 1024)");
  if (num_pages * page_size > (int64_t{1} << 31) - 1)
    fail("KV pool: ", num_pages, " pages of ", page_size,
         " slots exceed 2^31 - 1 slots (the kernels address slots with 32-bit ints)");
  return static_cast<size_t>(num_pages);
}
}  // namespace

KvPool::KvPool(int64_t num_pages, int32_t page_size)
    : page_size_(page_size),
      refs_(checked_pages(num_pages, page_size), 0),
      lru_at_(refs_.size()),
      hash_of_(refs_.size()) {
  free_.reserve(refs_.size());
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

std::optional<int32_t> KvPool::allocate() {
  int32_t page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    page = lru_.front();
    lru_.pop_front();
    unpublish(page);
  } else {
    return std::nullopt;
  }
  refs_[static_cast<size_t>(page)] = 1;
  return page;
}

void KvPool::retain(int32_t page) {
  int32_t& r = refs_.at(static_cast<size_t>(page));
  if (r == 0) {
    if (!published(page)) fail("KV pool: retain of free page ", page);
    lru_.erase(lru_at_[static_cast<size_t>(page)]);  // a cached page is in use again
  }
  ++r;
}

void KvPool::release(int32_t page) {
  int32_t& r = refs_.at(static_cast<size_t>(page));
  if (r <= 0) fail("KV pool: release of unreferenced page ", page);
  if (--r > 0) return;
  if (published(page)) {
    lru_at_[static_cast<size_t>(page)] = lru_.insert(lru_.end(), page);
  } else {
    free_.push_back(page);
  }
}

void KvPool::publish(int32_t page, uint64_t hash) {
  if (refs_.at(static_cast<size_t>(page)) <= 0) fail("KV pool: publish of free page ", page);
  if (page_of_.count(hash)) return;
  unpublish(page);
  hash_of_[static_cast<size_t>(page)] = hash;
  page_of_[hash] = page;
}

void KvPool::unpublish(int32_t page) {
  auto& h = hash_of_.at(static_cast<size_t>(page));
  if (!h) return;
  page_of_.erase(*h);
  h.reset();
}

std::optional<int32_t> KvPool::lookup(uint64_t hash) {
  ++lookups_;
  const auto it = page_of_.find(hash);
  if (it == page_of_.end()) return std::nullopt;
  ++hits_;
  retain(it->second);
  return it->second;
}

}  // namespace dllm
