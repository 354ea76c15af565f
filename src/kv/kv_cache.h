// KvCache: the K/V of one sequence, addressed by slot. Slots [0, length) are committed; a forward
// may also write slots past length as scratch (denoising steps that must not commit) or rewrite
// chosen slots in place (d2Cache refresh, WeDLM window). Each slot remembers the logical position
// its token was encoded at, which block-causal attention needs.
//
// This class keeps the bookkeeping; each backend subclasses it with its own storage.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dllm {

class KvCache {
 public:
  virtual ~KvCache() = default;

  int64_t length() const { return length_; }
  int64_t capacity() const { return static_cast<int64_t>(positions_.size()); }
  std::span<const int32_t> positions() const { return positions_; }

  // Commit: slots [0, n) now hold final K/V. n may exceed the old length only over written slots.
  void set_length(int64_t n);
  // Roll back to the first n committed slots (n <= length).
  void truncate(int64_t n);
  // Grows storage to hold at least n slots; existing contents are kept.
  void reserve(int64_t n);
  // Records the logical position a slot's K/V was encoded at (backends call it when they write).
  void set_position(int64_t slot, int32_t pos) { positions_[static_cast<size_t>(slot)] = pos; }

 protected:
  virtual void grow_storage(int64_t new_capacity) = 0;
  std::vector<int32_t> positions_;
  int64_t length_ = 0;
};

}  // namespace dllm
