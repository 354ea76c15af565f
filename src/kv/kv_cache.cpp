#include "kv/kv_cache.h"

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

void KvCache::reserve(int64_t n) {
  if (n <= capacity()) return;
  // Grow geometrically so that appending block by block stays amortised O(1).
  int64_t cap = capacity() > 0 ? capacity() : 16;
  while (cap < n) cap *= 2;
  grow_storage(cap);
  positions_.resize(static_cast<size_t>(cap), -1);
}

}  // namespace dllm
