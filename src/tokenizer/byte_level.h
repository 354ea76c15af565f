// The GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable Unicode character
// (printable Latin-1 bytes map to themselves, the rest to U+0100 and up; the space becomes 'Ġ').
// Byte-level BPE vocabularies spell tokens in this alphabet; we keep the model on raw bytes and
// translate only at the edges (loading the vocabulary, decoding ids).
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace dllm {

// The regex the ByteLevel pre-tokenizer applies when `use_regex` is true (GPT-2's).
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  char32_t char_of_byte(unsigned char b) const { return char_of_byte_[b]; }
  // The byte a character stands for, or -1 if the character is not in the alphabet.
  int byte_of_char(char32_t c) const { return c < byte_of_char_.size() ? byte_of_char_[c] : -1; }

  // Raw bytes -> their spelling in the alphabet (UTF-8).
  std::string encode(std::string_view bytes) const;
  // A token's spelling -> the bytes it stands for, appended to out. Returns false (and appends
  // nothing) if some character is outside the alphabet; Hugging Face's ByteLevel decoder then uses
  // the token's own UTF-8 text, which callers do too.
  bool decode(std::string_view token, std::string& out) const;

 private:
  ByteLevelAlphabet();
  std::array<char32_t, 256> char_of_byte_{};
  std::array<short, 324> byte_of_char_{};  // the alphabet ends at U+0143
};

}  // namespace dllm
