#include "kv/host_kv_cache.h"

namespace dllm {

HostKvCache::HostKvCache(int64_t num_layers, int64_t kv_dim, int64_t initial_capacity)
    : kv_dim_(kv_dim), k_(static_cast<size_t>(num_layers)), v_(static_cast<size_t>(num_layers)) {
  reserve(initial_capacity);
}

void HostKvCache::grow_storage(int64_t new_capacity) {
  const size_t n = static_cast<size_t>(new_capacity * kv_dim_);
  for (auto& layer : k_) layer.resize(n);
  for (auto& layer : v_) layer.resize(n);
}

}  // namespace dllm
