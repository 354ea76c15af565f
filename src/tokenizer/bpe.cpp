#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace dllm {

// ---- MergeTable ----

void MergeTable::reserve(size_t count) {
  const size_t wanted = std::bit_ceil(std::max<size_t>(2, count * 2));  // load factor <= 1/2
  if (wanted <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(wanted, Slot{});
  mask_ = wanted - 1;
  shift_ = 64 - std::countr_zero(wanted);
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty)
      insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key), s.merge);
  }
}

void MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) reserve(size_ + 1);
  const uint64_t key = pack(left, right);
  for (uint64_t i = slot_of(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.merge = merge;
      return;
    }
    if (s.key == kEmpty) {
      s = Slot{key, merge};
      ++size_;
      return;
    }
  }
}

// ---- BpeModel ----

BpeModel::BpeModel(BpeSource source, const std::string& file, size_t added_token_count)
    : token_text_(std::move(source.strings.text)),
      fuse_unk_(source.fuse_unk),
      ignore_merges_(source.ignore_merges) {
  // Views point into token_text_ (this object is never moved: it holds the word cache's mutexes).
  auto view = [this](StringTable::Ref r) {
    return std::string_view(token_text_).substr(r.offset, r.length);
  };

  const int64_t limit = std::min<int64_t>(token_id_limit(source.vocab.size() + added_token_count),
                                          std::numeric_limits<int32_t>::max());
  int64_t max_id = -1;
  for (const auto& e : source.vocab) {
    if (e.id < 0 || e.id >= limit)
      fail(file, ": model.vocab id ", e.id, " of token '", view(e.token),
           "' is outside the accepted range 0..", limit - 1, " (the file defines ",
           source.vocab.size() + added_token_count, " tokens; ids may leave at most ",
           kTokenIdGapAllowance, " unused)");
    max_id = std::max(max_id, e.id);
  }
  token_to_id_.reserve(source.vocab.size());
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string_view{});
  has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& e : source.vocab) {
    const std::string_view token = view(e.token);
    const auto id = static_cast<int32_t>(e.id);
    // Two tokens with one id would make decoding ambiguous. (A repeated key is harmless: the
    // last one wins, like serde.)
    if (has_id_[id] && id_to_token_[id] != token)
      fail(file, ": model.vocab tokens '", id_to_token_[id], "' and '", token, "' both have id ",
           id, "; ids must be unique");
    token_to_id_.insert_or_assign(token, id);
    id_to_token_[id] = token;
    has_id_[id] = true;
  }

  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    utf8::append_code_point(alphabet.char_of_byte(static_cast<unsigned char>(b)), spelled);
    const auto it = token_to_id_.find(spelled);
    byte_id_[b] = it == token_to_id_.end() ? -1 : it->second;
  }

  merges_.reserve(source.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < source.merges.size(); ++rank) {
    const auto& m = source.merges[rank];
    const std::string_view left = view(m.left), right = view(m.right);
    const auto l = token_to_id_.find(left);
    const auto r = token_to_id_.find(right);
    if (l == token_to_id_.end() || r == token_to_id_.end()) {
      fail(file, ": model.merges[", rank, "] '", left, " ", right, "' uses token '",
           l == token_to_id_.end() ? left : right, "' that is not in model.vocab");
    }
    joined.assign(left).append(right);
    const auto merged = token_to_id_.find(joined);
    if (merged == token_to_id_.end()) {
      fail(file, ": model.merges[", rank, "] '", left, " ", right, "' makes '", joined,
           "' that is not in model.vocab");
    }
    merges_.insert(l->second, r->second, {static_cast<int32_t>(rank), merged->second});
  }

  if (source.unk_token) {
    const auto it = token_to_id_.find(*source.unk_token);
    if (it == token_to_id_.end())
      fail(file, ": model.unk_token '", *source.unk_token, "' is not in model.vocab");
    unk_id_ = it->second;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = token_to_id_.find(token);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string_view> BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit() || !has_id_[id]) return std::nullopt;
  return id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  symbols.clear();
  bool previous_unk = false;
  for (char c : word) {
    const int32_t id = byte_id_[static_cast<unsigned char>(c)];
    if (id >= 0) {
      symbols.push_back(id);
      previous_unk = false;
    } else if (unk_id_) {
      // A byte missing from the vocabulary becomes unk (consecutive ones fused if asked);
      // without an unk token Hugging Face drops it, and so do we.
      if (!(fuse_unk_ && previous_unk)) symbols.push_back(*unk_id_);
      previous_unk = true;
    }
  }
}

void BpeModel::merge_by_scan(const std::vector<int32_t>& symbols, std::vector<int32_t>& out) const {
  // Short words: arrays of symbols and of the merge available at each adjacent pair; each step
  // merges the lowest rank (leftmost on ties) and refreshes only the two pairs next to it.
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  thread_local std::vector<int32_t> ids, rank, merged;
  ids.assign(symbols.begin(), symbols.end());
  size_t n = ids.size();
  rank.resize(n);
  merged.resize(n);
  auto refresh = [&](size_t i) {
    const MergeTable::Merge* m = merges_.find(ids[i], ids[i + 1]);
    rank[i] = m ? m->rank : kNone;
    merged[i] = m ? m->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) refresh(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNone) break;
    ids[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) refresh(best - 1);
    if (best + 1 < n) refresh(best);
  }
  out.insert(out.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
}

void BpeModel::merge_by_heap(const std::vector<int32_t>& symbols, std::vector<int32_t>& out) const {
  // Long words: doubly linked symbols and a min-heap of candidate merges keyed by (rank, position).
  // Entries go stale when a neighbour changes; a popped entry is used only if the pair at its
  // position still merges into the same token (as Hugging Face checks).
  struct Candidate {
    int32_t rank, pos, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const auto n = static_cast<int32_t>(symbols.size());
  std::vector<int32_t> ids(symbols.begin(), symbols.end()), prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(std::greater<>{},
                                                                              std::move(storage));
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const MergeTable::Merge* m = merges_.find(ids[pos], ids[next[pos]]))
      heap.push({m->rank, pos, m->merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const int32_t right = next[c.pos];
    const MergeTable::Merge* m = merges_.find(ids[c.pos], ids[right]);
    if (m == nullptr || m->merged != c.merged) continue;
    ids[c.pos] = c.merged;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push_pair(prev[c.pos]);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) out.push_back(ids[i]);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() == 1 && byte_id_[static_cast<unsigned char>(word[0])] >= 0) {
    out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    // Hugging Face's ignore_merges: a word that is itself a token is taken whole.
    const auto it = token_to_id_.find(ByteLevelAlphabet::get().encode(word));
    if (it != token_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (cache_.lookup(word, out)) return;
  thread_local std::vector<int32_t> symbols;  // reused; a huge word's buffer is not kept
  if (symbols.capacity() > 4096) symbols = {};
  initial_symbols(word, symbols);
  const size_t before = out.size();
  if (symbols.size() <= 64) {
    merge_by_scan(symbols, out);
  } else {
    merge_by_heap(symbols, out);
  }
  cache_.insert(word, out.data() + before, out.size() - before);
}

void BpeModel::encode_words(const std::vector<std::string_view>& words,
                            std::vector<int32_t>& out) const {
  // Word-cache entries are scattered over megabytes; asking for the next words' entries early
  // hides most of the memory latency of the lookups.
  constexpr size_t kAhead = 4;
  for (size_t i = 0; i < words.size() && i < kAhead; ++i) cache_.prefetch(words[i]);
  for (size_t i = 0; i < words.size(); ++i) {
    if (i + kAhead < words.size()) cache_.prefetch(words[i + kAhead]);
    encode_word(words[i], out);
  }
}

}  // namespace dllm
