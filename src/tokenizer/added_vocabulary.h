// tokenizer.json "added_tokens": strings matched in the input before normalization and
// pre-tokenization and emitted as single ids (Hugging Face with split_special_tokens=false).
// Matching is leftmost-longest; `single_word`, `lstrip`, `rstrip` and `normalized` behave as in
// Hugging Face's AddedVocabulary.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dllm {

class Normalizer;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  struct Segment {
    size_t start, end;  // byte range in the searched text
    int32_t id;         // the added token's id, or -1 for text in between
  };

  AddedVocabulary() = default;
  // Tokens with normalized=true are matched on normalized text by their normalized content.
  AddedVocabulary(const std::vector<AddedToken>& tokens, const Normalizer& normalizer);

  // Splits `text` into added-token matches and the text between them. `normalized_pass` selects
  // the tokens matched on raw text (false) or on normalized text (true).
  void split(std::string_view text, bool normalized_pass, std::vector<Segment>& out) const;
  bool has_tokens(bool normalized_pass) const { return !tries_[normalized_pass].nodes.empty(); }

 private:
  struct Pattern {
    int32_t id;
    bool single_word, lstrip, rstrip;
  };
  // Byte trie; `pattern` is the index of the pattern ending at a node (-1 if none).
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;
      int32_t pattern = -1;
    };
    std::vector<Node> nodes;  // nodes[0] is the root when non-empty
    std::vector<Pattern> patterns;
    std::array<bool, 256> first_byte{};  // bytes that can start a pattern
    void add(std::string_view key, const Pattern& pattern);
    int32_t child(int32_t node, unsigned char b) const;
    // Longest pattern starting at text[pos]: returns {pattern index, length} or {-1, 0}.
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
  };
  std::array<Trie, 2> tries_;
};

}  // namespace dllm
