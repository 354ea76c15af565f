// Python str semantics over UTF-8 std::string: templates index, slice, strip, split and case-map by
// code point, exactly as the Python jinja2 that Hugging Face renders with. Bytes that are not valid
// UTF-8 map to U+DC80..U+DCFF (Python's "surrogateescape") so they survive a round trip unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dllm::jinja::py {

std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view code_points);
void append_utf8(std::string& out, char32_t code_point);
// Number of code points (Python len()).
size_t length(std::string_view utf8);
bool is_ascii(std::string_view s);

// str.isspace() for one code point (also what Python's re \s matches).
bool is_space(char32_t c);
// Length in bytes of the whitespace run at the start / end of s.
size_t leading_space_bytes(std::string_view s);
size_t trailing_space_bytes(std::string_view s);

// str.strip / lstrip / rstrip; chars == nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
// str.split / rsplit; sep == nullopt splits on whitespace runs and drops empty parts.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                    int64_t count);
// str.find / rfind: code-point index of the first / last occurrence, -1 if absent.
int64_t find(std::string_view s, std::string_view sub);
int64_t rfind(std::string_view s, std::string_view sub);
int64_t count(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
bool is_cased_upper(std::string_view s);     // str.isupper()
bool is_cased_lower(std::string_view s);     // str.islower()
bool all_of_class(std::string_view s, bool (*predicate)(char32_t));
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
bool is_alnum(char32_t c);

// Python repr() of a str: quotes and escapes chosen the way CPython does.
std::string repr(std::string_view s);

}  // namespace dllm::jinja::py
