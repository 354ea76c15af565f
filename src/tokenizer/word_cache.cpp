#include "tokenizer/word_cache.h"

#include <cstring>

namespace dllm {

WordCache::WordCache() {
  for (Shard& s : shards_) s.entries = std::make_unique<Entry[]>(kEntriesPerShard);
}

uint64_t WordCache::hash(std::string_view word) {
  // Words here are at most 26 bytes: mix 8 bytes at a time (multiply + fold), then finalize.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ word.size();
  size_t i = 0;
  for (; i + 8 <= word.size(); i += 8) {
    uint64_t chunk;
    std::memcpy(&chunk, word.data() + i, 8);
    h = (h ^ chunk) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, word.data() + i, word.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

void WordCache::prefetch(std::string_view word) const {
  if (word.size() > kMaxWordBytes) return;
  const uint64_t h = hash(word);
  __builtin_prefetch(&shards_[h % kShards].entries[(h >> 4) % kEntriesPerShard]);
}

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() > kMaxWordBytes) return false;
  const uint64_t h = hash(word);
  const uint32_t tag = static_cast<uint32_t>(h >> 32) | 1;
  Shard& shard = shards_[h % kShards];
  const size_t home = (h >> 4) % kEntriesPerShard;
  std::lock_guard lock(shard.mutex);
  for (size_t p = 0; p < kProbes; ++p) {
    const Entry& e = shard.entries[(home + p) % kEntriesPerShard];
    if (e.tag == 0) return false;
    if (e.tag == tag && e.word_length == word.size() &&
        std::memcmp(e.word, word.data(), word.size()) == 0) {
      out.insert(out.end(), e.ids, e.ids + e.id_count);
      return true;
    }
  }
  return false;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t count) {
  if (word.size() > kMaxWordBytes || count > kMaxIds) return;
  const uint64_t h = hash(word);
  const uint32_t tag = static_cast<uint32_t>(h >> 32) | 1;
  Shard& shard = shards_[h % kShards];
  const size_t home = (h >> 4) % kEntriesPerShard;
  std::lock_guard lock(shard.mutex);
  // The first free probe slot, else the home slot (older words make room for newer ones).
  Entry* slot = &shard.entries[home];
  for (size_t p = 0; p < kProbes; ++p) {
    Entry& e = shard.entries[(home + p) % kEntriesPerShard];
    if (e.tag == 0) {
      slot = &e;
      break;
    }
  }
  slot->tag = tag;
  slot->word_length = static_cast<uint8_t>(word.size());
  slot->id_count = static_cast<uint8_t>(count);
  std::memcpy(slot->word, word.data(), word.size());
  std::memcpy(slot->ids, ids, count * sizeof(int32_t));
}

}  // namespace dllm
