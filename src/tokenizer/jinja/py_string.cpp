#include "tokenizer/jinja/py_string.h"

#include "tokenizer/jinja/limits.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja::py {

namespace {

constexpr char32_t kEscapedByteBase = 0xDC00;  // surrogateescape: invalid byte b -> U+DC00+b

// Decodes one code point starting at s[i]; advances i. Invalid sequences yield one escaped byte.
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int extra = 0;
  char32_t c = 0;
  char32_t min_value = 0;
  if ((b0 & 0xE0) == 0xC0) {
    extra = 1, c = b0 & 0x1F, min_value = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    extra = 2, c = b0 & 0x0F, min_value = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    extra = 3, c = b0 & 0x07, min_value = 0x10000;
  } else {
    ++i;
    return kEscapedByteBase + b0;
  }
  if (i + extra >= s.size()) {
    ++i;
    return kEscapedByteBase + b0;
  }
  for (int k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return kEscapedByteBase + b0;
    }
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min_value || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    ++i;
    return kEscapedByteBase + b0;
  }
  i += extra + 1;
  return c;
}

// Start of the last code point of s[0, end).
size_t previous_start(std::string_view s, size_t end) {
  size_t start = end - 1;
  int back = 0;
  while (start > 0 && back < 3 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
    --start;
    ++back;
  }
  size_t probe = start;
  next_code_point(s, probe);
  return probe == end ? start : end - 1;  // an invalid tail decodes byte by byte
}

bool category_is(char32_t c, std::initializer_list<utf8proc_category_t> categories) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return std::find(categories.begin(), categories.end(), category) != categories.end();
}

bool is_cased(char32_t c) {
  return category_is(c, {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT});
}

char32_t to_upper(char32_t c) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_lower(char32_t c) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_title(char32_t c) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

std::u32string strip_set(const std::optional<std::string>& chars) {
  return chars ? decode(*chars) : std::u32string();
}

size_t code_points_before(std::string_view s, size_t byte_pos) {
  return length(s.substr(0, byte_pos));
}

}  // namespace

std::u32string decode(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) out.push_back(next_code_point(utf8, i));
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c >= kEscapedByteBase + 0x80 && c <= kEscapedByteBase + 0xFF) {
    out.push_back(static_cast<char>(c - kEscapedByteBase));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) append_utf8(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; });
}

size_t length(std::string_view utf8) {
  if (is_ascii(utf8)) return utf8.size();
  size_t n = 0;
  for (size_t i = 0; i < utf8.size(); ++n) next_code_point(utf8, i);
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

size_t leading_space_bytes(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    if (!is_space(next_code_point(s, next))) break;
    i = next;
  }
  return i;
}

size_t trailing_space_bytes(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    const size_t start = previous_start(s, end);
    size_t probe = start;
    if (!is_space(next_code_point(s, probe))) break;
    end = start;
  }
  return s.size() - end;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  if (!chars) {
    const size_t lead = left ? leading_space_bytes(s) : 0;
    if (lead == s.size()) return "";
    const size_t trail = right ? trailing_space_bytes(s) : 0;
    return std::string(s.substr(lead, s.size() - lead - trail));
  }
  const std::u32string set = strip_set(chars);
  const std::u32string cps = decode(s);
  size_t begin = 0, end = cps.size();
  auto in_set = [&](char32_t c) { return set.find(c) != std::u32string::npos; };
  if (left)
    while (begin < end && in_set(cps[begin])) ++begin;
  if (right)
    while (end > begin && in_set(cps[end - 1])) --end;
  return encode(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (sep->empty()) throw_error("empty separator");
    size_t start = 0;
    while (maxsplit-- > 0) {
      const size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  const std::u32string cps = decode(s);
  size_t i = 0;
  const size_t n = cps.size();
  while (true) {
    while (i < n && is_space(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit-- <= 0) {
      parts.push_back(encode(std::u32string_view(cps).substr(i)));
      break;
    }
    size_t j = i;
    while (j < n && !is_space(cps[j])) ++j;
    parts.push_back(encode(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return parts;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (sep->empty()) throw_error("empty separator");
    size_t end = s.size();
    while (maxsplit-- > 0) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  const std::u32string cps = decode(s);
  size_t end = cps.size();
  while (true) {
    while (end > 0 && is_space(cps[end - 1])) --end;
    if (end == 0) break;
    if (maxsplit-- <= 0) {
      parts.push_back(encode(std::u32string_view(cps).substr(0, end)));
      break;
    }
    size_t start = end;
    while (start > 0 && !is_space(cps[start - 1])) --start;
    parts.push_back(encode(std::u32string_view(cps).substr(start, end - start)));
    end = start;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  const std::u32string cps = decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) continue;
    size_t line_end = i;
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    lines.push_back(
        encode(std::u32string_view(cps).substr(start, (keepends ? i + 1 : line_end) - start)));
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(encode(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                    int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  // A short text replaced by a long one grows without bound: check as the result grows.
  auto add_replacement = [&] {
    check_string_bytes(uint64_t{out.size()} + new_text.size(), "the result of replace()");
    out += new_text;
  };
  if (old_text.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const std::u32string cps = decode(s);
    for (char32_t c : cps) {
      if (count-- > 0) add_replacement();
      append_utf8(out, c);
    }
    if (count-- > 0) add_replacement();
    return out;
  }
  size_t start = 0;
  while (count-- > 0) {
    const size_t at = s.find(old_text, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    add_replacement();
    start = at + old_text.size();
  }
  out += s.substr(start);
  return out;
}

int64_t find(std::string_view s, std::string_view sub) {
  const size_t at = s.find(sub);
  return at == std::string_view::npos ? -1 : static_cast<int64_t>(code_points_before(s, at));
}

int64_t rfind(std::string_view s, std::string_view sub) {
  const size_t at = s.rfind(sub);
  return at == std::string_view::npos ? -1 : static_cast<int64_t>(code_points_before(s, at));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size()))
    ++n;
  return n;
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode(s)) append_utf8(out, to_upper(c));
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode(s)) append_utf8(out, to_lower(c));
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool previous_is_cased = false;
  for (char32_t c : decode(s)) {
    append_utf8(out, previous_is_cased ? to_lower(c) : to_title(c));
    previous_is_cased = is_cased(c);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : decode(s)) {
    append_utf8(out, first ? to_title(c) : to_lower(c));
    first = false;
  }
  return out;
}

bool is_cased_upper(std::string_view s) {
  bool any_cased = false;
  for (char32_t c : decode(s)) {
    if (category_is(c, {UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT})) return false;
    any_cased = any_cased || category_is(c, {UTF8PROC_CATEGORY_LU});
  }
  return any_cased;
}

bool is_cased_lower(std::string_view s) {
  bool any_cased = false;
  for (char32_t c : decode(s)) {
    if (category_is(c, {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LT})) return false;
    any_cased = any_cased || category_is(c, {UTF8PROC_CATEGORY_LL});
  }
  return any_cased;
}

bool all_of_class(std::string_view s, bool (*predicate)(char32_t)) {
  const std::u32string cps = decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), predicate);
}

bool is_alpha(char32_t c) {
  return category_is(c, {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT,
                         UTF8PROC_CATEGORY_LM, UTF8PROC_CATEGORY_LO});
}

bool is_digit(char32_t c) {
  return category_is(c, {UTF8PROC_CATEGORY_ND});
}

bool is_alnum(char32_t c) {
  return is_alpha(c) ||
         category_is(c, {UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO});
}

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  static const char* kHex = "0123456789abcdef";
  auto hex = [&](char32_t c, int digits) {
    for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4)
      out.push_back(kHex[(c >> shift) & 0xF]);
  };
  for (char32_t c : decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      hex(c, 2);
    } else if (c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else if (!category_is(c, {UTF8PROC_CATEGORY_CC, UTF8PROC_CATEGORY_CF, UTF8PROC_CATEGORY_CS,
                                UTF8PROC_CATEGORY_CO, UTF8PROC_CATEGORY_CN, UTF8PROC_CATEGORY_ZL,
                                UTF8PROC_CATEGORY_ZP, UTF8PROC_CATEGORY_ZS})) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      out += "\\x";
      hex(c, 2);
    } else if (c <= 0xFFFF) {
      out += "\\u";
      hex(c, 4);
    } else {
      out += "\\U";
      hex(c, 8);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace dllm::jinja::py
