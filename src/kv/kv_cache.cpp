#include "kv/kv_cache.h"

#include <set>

#include "core/error.h"

namespace dllm {

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > capacity()) fail("kv cache: length ", n, " outside capacity ", capacity());
  length_ = n;
}

void KvCache::truncate(int64_t n) {
  if (n < 0 || n > length_) fail("kv cache: cannot truncate to ", n, " (length ", length_, ")");
  length_ = n;
}

int64_t KvCache::pages_for(int64_t n) const {
  const int64_t ps = pool_->page_size();
  const int64_t have = static_cast<int64_t>(pages_.size());
  return std::max<int64_t>(0, (n + ps - 1) / ps - have);
}

void KvCache::reserve(int64_t n) {
  const int64_t need = pages_for(n);
  if (need == 0) return;
  if (need > pool_->available_pages())
    fail("KV pool exhausted: a sequence needs ", need, " more pages of ", pool_->page_size(),
         " slots, ", pool_->available_pages(), " of ", pool_->num_pages(), " are available");
  for (int64_t i = 0; i < need; ++i) pages_.push_back(*pool_->allocate());
  positions_.resize(pages_.size() * static_cast<size_t>(pool_->page_size()), -1);
}

int64_t KvCache::copy_pages_for(std::span<const int32_t> slots) const {
  std::set<int32_t> shared;
  const int32_t ps = pool_->page_size();
  for (int32_t s : slots) {
    const size_t logical = static_cast<size_t>(s / ps);
    if (logical < pages_.size() && pool_->references(pages_[logical]) > 1)
      shared.insert(static_cast<int32_t>(logical));
  }
  return static_cast<int64_t>(shared.size());
}

std::vector<std::pair<int32_t, int32_t>> KvCache::prepare_writes(std::span<const int32_t> slots) {
  if (copy_pages_for(slots) > pool_->available_pages())
    fail("KV pool exhausted: copying shared prefix pages before a write needs ",
         copy_pages_for(slots), " pages, ", pool_->available_pages(), " are available");
  std::vector<std::pair<int32_t, int32_t>> copies;
  const int32_t ps = pool_->page_size();
  for (int32_t s : slots) {
    const size_t logical = static_cast<size_t>(s / ps);
    if (logical >= pages_.size()) continue;
    int32_t& page = pages_[logical];
    if (pool_->references(page) > 1) {
      const int32_t fresh = *pool_->allocate();
      copies.emplace_back(page, fresh);
      pool_->release(page);
      page = fresh;
    } else if (pool_->published(page)) {
      pool_->unpublish(page);
    }
  }
  return copies;
}

void KvCache::adopt_prefix(std::span<const int32_t> pages) {
  if (!pages_.empty() || length_ != 0) fail("kv cache: adopt_prefix needs an empty cache");
  pages_.assign(pages.begin(), pages.end());
  positions_.resize(pages_.size() * static_cast<size_t>(pool_->page_size()));
  for (size_t i = 0; i < positions_.size(); ++i) positions_[i] = static_cast<int32_t>(i);
  length_ = static_cast<int64_t>(positions_.size());
}

void KvCache::clear() {
  for (int32_t p : pages_) pool_->release(p);
  pages_.clear();
  positions_.clear();
  length_ = 0;
}

}  // namespace dllm
