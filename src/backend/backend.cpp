#include "backend/backend.h"

#include "backend/sequence_slots.h"
#include "core/error.h"

namespace dllm {

void Backend::create_kv_pool(int64_t num_pages, int32_t page_size) {
  if (pool_) fail("the KV pool of this backend exists already (it is sized once)");
  auto pool = std::make_unique<KvPool>(num_pages, page_size);
  // Set first: a group's coordinator hands the pool to its ranks while allocating.
  pool_ = pool.get();
  try {
    allocate_kv_storage(pool->num_slots());
  } catch (...) {
    pool_ = nullptr;
    throw;
  }
  own_pool_ = std::move(pool);
}

void Backend::join_group_pool(KvPool& pool) {
  if (pool_) fail("the KV pool of this backend exists already (it is sized once)");
  allocate_kv_storage(pool.num_slots());
  pool_ = &pool;
  group_rank_ = true;
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
  if (&cache.pool() != pool_) fail("the cache was not created by this backend");
  if (group_rank_) {  // the coordinator reserved and un-shared already
    if (cache.capacity() < needed_capacity)
      fail("internal: a tensor-parallel rank got a cache of ", cache.capacity(),
           " slots for a forward that needs ", needed_capacity);
    return;
  }
  cache.reserve(needed_capacity);
  const auto copies = cache.prepare_writes(query_slots);
  if (!copies.empty()) copy_kv_pages(copies);
}

void Backend::commit_cache_writes(const SequenceForward& seq, KvCache& cache,
                                  std::span<const int32_t> query_slots) {
  if (!group_rank_) dllm::commit_cache_writes(seq, cache, query_slots);
}

}  // namespace dllm
