// Cache of pre-tokenized word -> BPE ids, shared by all threads encoding with one tokenizer.
// Most pieces of real text repeat, so a hit must cost about one cache-line read: entries are
// fixed 64-byte slots (key and ids inline) in open-addressed tables, one mutex per shard. Words or
// results too long for a slot are simply not cached.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

namespace dllm {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 26;
  static constexpr size_t kMaxIds = 8;

  WordCache();
  // Appends the cached ids of `word` to `out`; false if not cached.
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;
  // Starts loading the entry `word` would use, so a lookup a little later finds it in cache.
  void prefetch(std::string_view word) const;
  // Remembers ids for `word` (ignored when either is too long), evicting an older entry if needed.
  void insert(std::string_view word, const int32_t* ids, size_t count);

 private:
  struct alignas(64) Entry {
    uint32_t tag = 0;  // hash bits, never 0 for a used entry
    uint8_t word_length = 0;
    uint8_t id_count = 0;
    char word[kMaxWordBytes];
    int32_t ids[kMaxIds];
  };
  static_assert(sizeof(Entry) == 64);
  static constexpr size_t kShards = 16;
  static constexpr size_t kEntriesPerShard = 4096;  // 16 x 4096 x 64 B = 4 MiB
  static constexpr size_t kProbes = 4;
  struct Shard {
    std::mutex mutex;
    std::unique_ptr<Entry[]> entries;
  };
  static uint64_t hash(std::string_view word);
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace dllm
