#include "backend/backend.h"

#include "core/error.h"

namespace dllm {

void Backend::create_kv_pool(int64_t num_pages, int32_t page_size) {
  if (pool_) fail("the KV pool of this backend exists already (it is sized once)");
  auto pool = std::make_unique<KvPool>(num_pages, page_size);
  allocate_kv_storage(pool->num_slots());
  pool_ = std::move(pool);
}

KvPool& Backend::kv_pool() {
  if (!pool_) {
    constexpr int32_t kPageSize = 16;
    const int64_t slots = std::max<int64_t>(default_kv_pool_bytes() / kv_bytes_per_slot(), 1);
    create_kv_pool(std::max<int64_t>(slots / kPageSize, 1), kPageSize);
  }
  return *pool_;
}

std::unique_ptr<KvCache> Backend::create_cache(int64_t capacity) {
  auto cache = std::make_unique<KvCache>(kv_pool());
  cache->reserve(capacity);
  return cache;
}

void Backend::prepare_cache_writes(KvCache& cache, std::span<const int32_t> query_slots,
                                   int64_t needed_capacity) {
  if (&cache.pool() != pool_.get()) fail("the cache was not created by this backend");
  cache.reserve(needed_capacity);
  const auto copies = cache.prepare_writes(query_slots);
  if (!copies.empty()) copy_kv_pages(copies);
}

}  // namespace dllm
