#include "server/base64.h"

#include <array>

#include "core/error.h"

namespace dllm::server {

namespace {

constexpr int8_t kInvalid = -1;

constexpr std::array<int8_t, 256> decoding_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = kInvalid;
  constexpr std::string_view alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < alphabet.size(); ++i)
    t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
  return t;
}

constexpr std::array<int8_t, 256> kTable = decoding_table();

// The text without its padding; Error when the padding is malformed.
std::string_view strip_padding(std::string_view text) {
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=') --end;
  const size_t pad = text.size() - end;
  if (pad > 2 || (pad > 0 && text.size() % 4 != 0))
    fail("base64: bad padding at offset ", end, " (", pad, " '=' after ", end, " characters)");
  return text.substr(0, end);
}

}  // namespace

size_t base64_decoded_size(std::string_view text) {
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=') --end;
  return end / 4 * 3 + (end % 4 == 0 ? 0 : end % 4 - 1);
}

std::string base64_decode(std::string_view text) {
  const std::string_view body = strip_padding(text);
  std::string out;
  out.reserve(base64_decoded_size(body));
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const int8_t v = kTable[static_cast<uint8_t>(body[i])];
    if (v == kInvalid)
      fail("base64: character ", static_cast<int>(static_cast<uint8_t>(body[i])), " at offset ", i,
           " is not in the base64 alphabet");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (body.size() % 4 == 1)
    fail("base64: ", text.size(), " characters is not a length any encoder produces");
  // The unused low bits of the last character must be zero (canonical encoding).
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
    fail("base64: the last character at offset ", body.size() - 1, " has stray bits");
  return out;
}

}  // namespace dllm::server
