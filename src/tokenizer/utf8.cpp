#include "tokenizer/utf8.h"

#include <cstdint>
#include <cstring>

namespace dllm::utf8 {

namespace {

// How many continuation bytes a lead byte needs and the allowed range of the first continuation
// (the ranges exclude overlong forms, surrogates and code points above U+10FFFF).
struct LeadInfo {
  int continuation_bytes;  // -1: not a valid lead byte
  unsigned char first_lo, first_hi;
};

LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {0, 0, 0};
  if (b < 0xC2) return {-1, 0, 0};
  if (b < 0xE0) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b < 0xF0) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b < 0xF4) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {-1, 0, 0};
}

// Scans the sequence at pos: returns {bytes that are a valid prefix of a sequence, complete?}.
// A valid lead byte alone counts as a prefix of length 1.
struct Scan {
  size_t valid_prefix;
  bool complete;
};

Scan scan(std::string_view text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  const LeadInfo info = lead_info(lead);
  if (info.continuation_bytes < 0) return {0, false};
  size_t n = 1;
  for (int k = 0; k < info.continuation_bytes; ++k, ++n) {
    if (pos + n >= text.size()) return {n, false};
    const auto c = static_cast<unsigned char>(text[pos + n]);
    const unsigned char lo = k == 0 ? info.first_lo : 0x80;
    const unsigned char hi = k == 0 ? info.first_hi : 0xBF;
    if (c < lo || c > hi) return {n, false};
  }
  return {n, true};
}

}  // namespace

size_t sequence_length(std::string_view text, size_t pos) {
  const Scan s = scan(text, pos);
  return s.complete ? s.valid_prefix : 0;
}

namespace {

constexpr uint64_t kHighBits = 0x8080808080808080ull;

// Length of the all-ASCII run starting at pos (stops within 8 bytes after a non-ASCII byte).
size_t ascii_run(std::string_view text, size_t pos) {
  const size_t start = pos;
  while (pos + 8 <= text.size()) {
    uint64_t word;
    std::memcpy(&word, text.data() + pos, 8);
    if (word & kHighBits) break;
    pos += 8;
  }
  while (pos < text.size() && static_cast<unsigned char>(text[pos]) < 0x80) ++pos;
  return pos - start;
}

}  // namespace

bool is_ascii(std::string_view text) {
  return ascii_run(text, 0) == text.size();
}

size_t find_invalid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      pos += ascii_run(text, pos);
      continue;
    }
    const size_t n = sequence_length(text, pos);
    if (n == 0) return pos;
    pos += n;
  }
  return std::string_view::npos;
}

char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const int extra = b0 < 0xE0 ? 1 : b0 < 0xF0 ? 2 : 3;
  char32_t cp = b0 & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  pos += extra + 1;
  return cp;
}

void append_code_point(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void append_lossy(std::string_view bytes, std::string& out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t pos = 0;
  size_t copied_until = 0;  // copy runs of valid text in one append
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Scan s = scan(bytes, pos);
    if (s.complete) {
      pos += s.valid_prefix;
      continue;
    }
    out.append(bytes.substr(copied_until, pos - copied_until));
    out.append(kReplacement);
    pos += s.valid_prefix == 0 ? 1 : s.valid_prefix;
    copied_until = pos;
  }
  out.append(bytes.substr(copied_until));
}

size_t incomplete_tail_length(std::string_view bytes) {
  // A sequence is at most 4 bytes, so only the last 3 bytes can start a cut-short one.
  const size_t first = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (size_t pos = first; pos < bytes.size(); ++pos) {
    const auto b = static_cast<unsigned char>(bytes[pos]);
    if (b < 0xC2 || b > 0xF4) continue;  // not a lead byte
    const Scan s = scan(bytes, pos);
    if (!s.complete && pos + s.valid_prefix == bytes.size()) return bytes.size() - pos;
  }
  return 0;
}

}  // namespace dllm::utf8
