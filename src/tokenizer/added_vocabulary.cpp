#include "tokenizer/added_vocabulary.h"

#include <utf8proc.h>

#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace dllm {

namespace {

// Unicode White_Space, which is what Hugging Face's `\s` means when it strips around tokens.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust regex's Unicode `\w` (Alphabetic, marks, decimal digits, connector punctuation,
// join controls), approximated with general categories plus the circled letters that are
// Other_Alphabetic.
bool is_word_char(char32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9)) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends at byte `end` (text[..end] must be valid UTF-8 and non-empty).
char32_t code_point_before(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return utf8::next_code_point(text, start);
}

}  // namespace

void AddedVocabulary::Trie::add(std::string_view key, const Pattern& pattern) {
  if (key.empty()) return;
  if (nodes.empty()) nodes.emplace_back();
  first_byte[static_cast<unsigned char>(key[0])] = true;
  int32_t node = 0;
  for (char ch : key) {
    const auto b = static_cast<unsigned char>(ch);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(b, next);
      nodes.emplace_back();
    }
    node = next;
  }
  // A repeated content keeps its first registration (Hugging Face ignores duplicates).
  if (nodes[node].pattern < 0) {
    nodes[node].pattern = static_cast<int32_t>(patterns.size());
    patterns.push_back(pattern);
  }
}

int32_t AddedVocabulary::Trie::child(int32_t node, unsigned char b) const {
  for (const auto& [byte, index] : nodes[node].children)
    if (byte == b) return index;
  return -1;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest_at(std::string_view text,
                                                             size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (nodes[node].pattern >= 0) best = {nodes[node].pattern, i + 1 - pos};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(const std::vector<AddedToken>& tokens,
                                 const Normalizer& normalizer) {
  // Hugging Face registers special tokens before the others; with leftmost-longest matching the
  // order only matters for identical contents.
  for (int pass = 0; pass < 2; ++pass) {
    for (const AddedToken& t : tokens) {
      if (t.content.empty() || t.special != (pass == 0)) continue;
      const Pattern p{t.id, t.single_word, t.lstrip, t.rstrip};
      if (t.normalized) {
        std::string storage;
        tries_[1].add(normalizer.apply(t.content, storage), p);
      } else {
        tries_[0].add(t.content, p);
      }
    }
  }
}

void AddedVocabulary::split(std::string_view text, bool normalized_pass,
                            std::vector<Segment>& out) const {
  const Trie& trie = tries_[normalized_pass];
  if (trie.nodes.empty() || text.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  size_t segment_start = 0;  // end of the last accepted match
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [pattern_index, length] = trie.longest_at(text, pos);
    if (pattern_index < 0) {
      ++pos;
      continue;
    }
    const Pattern& p = trie.patterns[pattern_index];
    size_t start = pos, stop = pos + length;
    pos = stop;  // matches never overlap, even a rejected one (as with aho-corasick's find_iter)
    if (p.single_word) {
      const bool word_before = start > 0 && is_word_char(code_point_before(text, start));
      size_t after = stop;
      const bool word_after =
          stop < text.size() && is_word_char(utf8::next_code_point(text, after));
      if (word_before || word_after) continue;
    }
    if (p.lstrip) {
      size_t s = start;
      while (s > segment_start && is_white_space(code_point_before(text, s))) {
        do --s;
        while ((static_cast<unsigned char>(text[s]) & 0xC0) == 0x80);
      }
      start = s;
    }
    if (p.rstrip) {
      size_t e = stop;
      while (e < text.size()) {
        size_t next = e;
        if (!is_white_space(utf8::next_code_point(text, next))) break;
        e = next;
      }
      stop = e;
      pos = stop;
    }
    if (segment_start < start) out.push_back({segment_start, start, -1});
    out.push_back({start, stop, p.id});
    segment_start = stop;
  }
  if (segment_start < text.size()) out.push_back({segment_start, text.size(), -1});
}

}  // namespace dllm
