// Byte-level BPE model: the vocabulary and merge ranks of tokenizer.json "model" (type BPE).
// Words are encoded from their raw bytes: each byte starts as the id of its byte-level character,
// then adjacent pairs are merged lowest rank first (leftmost on ties), exactly like Hugging Face.
// Results are cached per word, so frequent words cost one hash lookup.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/word_cache.h"

namespace dllm {

// Token strings of a vocabulary or merge list, stored back to back in one buffer (tokenizer.json
// holds ~150k of each; one buffer keeps loading fast and memory compact).
struct StringTable {
  std::string text;
  struct Ref {
    uint32_t offset, length;
  };
  Ref add(std::string_view s) {
    const Ref r{static_cast<uint32_t>(text.size()), static_cast<uint32_t>(s.size())};
    text.append(s);
    return r;
  }
  std::string_view get(Ref r) const { return std::string_view(text).substr(r.offset, r.length); }
};

struct BpeSource {
  StringTable strings;
  struct VocabEntry {
    StringTable::Ref token;
    int64_t id;
  };
  struct MergeEntry {
    StringTable::Ref left, right;
  };
  std::vector<VocabEntry> vocab;   // in file order
  std::vector<MergeEntry> merges;  // in rank order
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool ignore_merges = false;
};

// Open-addressing hash table (left id, right id) -> (rank, merged id); the hot lookup of encoding.
class MergeTable {
 public:
  struct Merge {
    int32_t rank, merged;
  };
  void reserve(size_t count);
  void insert(int32_t left, int32_t right, Merge merge);  // replaces an existing entry
  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (uint64_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t pack(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  uint64_t slot_of(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  std::vector<Slot> slots_ = std::vector<Slot>(2);
  uint64_t mask_ = 1;
  int shift_ = 63;
  size_t size_ = 0;
};

// Token ids may leave holes (padded vocabularies), but not arbitrary ones: every id must be below
// the number of tokens the file defines plus this allowance. The id-indexed tables are sized by
// the largest id, so a hostile id (2^31 - 2) would otherwise allocate tens of gigabytes.
inline constexpr int64_t kTokenIdGapAllowance = 65536;
// One past the largest token id a tokenizer.json with `token_count` tokens may use.
inline int64_t token_id_limit(size_t token_count) {
  return static_cast<int64_t>(token_count) + kTokenIdGapAllowance;
}

class BpeModel {
 public:
  // Errors (tokens missing from the vocabulary, bad, huge or repeated ids) name `file`.
  // `added_token_count`: tokens the file defines outside model.vocab (added_tokens), which count
  // towards the id limit.
  BpeModel(BpeSource source, const std::string& file, size_t added_token_count = 0);

  // Appends the ids of one pre-tokenized piece (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Appends the ids of consecutive pieces (overlapping their cache lookups).
  void encode_words(const std::vector<std::string_view>& words, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Byte-level spelling of `id`, or nullopt if the vocabulary has no such id.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }

  // The two merge strategies, public so tests can check they agree. Both append to `out`.
  void merge_by_scan(const std::vector<int32_t>& symbols, std::vector<int32_t>& out) const;
  void merge_by_heap(const std::vector<int32_t>& symbols, std::vector<int32_t>& out) const;

 private:
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;

  std::string token_text_;
  std::unordered_map<std::string_view, int32_t> token_to_id_;
  std::vector<std::string_view> id_to_token_;
  std::vector<bool> has_id_;
  std::array<int32_t, 256> byte_id_{};  // id of each byte's byte-level character, -1 if absent
  MergeTable merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  mutable WordCache cache_;  // a cache, not state: encode stays logically const
};

}  // namespace dllm
