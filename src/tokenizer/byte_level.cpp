#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace dllm {

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_char_.fill(-1);
  // Printable bytes keep their own code point; the others are numbered from U+0100 in byte order.
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  char32_t next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = printable(b) ? static_cast<char32_t>(b) : next_extra++;
    char_of_byte_[b] = c;
    byte_of_char_[c] = static_cast<short>(b);
  }
}

std::string ByteLevelAlphabet::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) utf8::append_code_point(char_of_byte_[static_cast<unsigned char>(b)], out);
  return out;
}

bool ByteLevelAlphabet::decode(std::string_view token, std::string& out) const {
  const size_t start = out.size();
  size_t pos = 0;
  while (pos < token.size()) {
    const int b = utf8::sequence_length(token, pos) == 0
                      ? -1
                      : byte_of_char(utf8::next_code_point(token, pos));
    if (b < 0) {
      out.resize(start);
      return false;
    }
    out += static_cast<char>(b);
  }
  return true;
}

}  // namespace dllm
