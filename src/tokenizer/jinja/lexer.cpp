#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "tokenizer/jinja/py_string.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

int count_newlines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// jinja2 turns \r\n and \r into \n and drops one trailing newline (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding, which jinja2 applies to string literals.
std::string unescape_string(std::string_view raw, int line) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 == raw.size()) {
      out.push_back(raw[i]);
      continue;
    }
    const char c = raw[++i];
    switch (c) {
      case '\n':
        break;  // line continuation
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t digits = c == 'x' ? 2 : (c == 'u' ? 4 : 8);
        char32_t code_point = 0;
        for (size_t k = 1; k <= digits; ++k) {
          const int h = i + k < raw.size() ? hex_value(raw[i + k]) : -1;
          if (h < 0) throw_syntax_error(line, "truncated \\", c, " escape in string literal");
          code_point = code_point * 16 + static_cast<char32_t>(h);
        }
        if (code_point > 0x10FFFF) throw_syntax_error(line, "illegal Unicode character in string");
        py::append_utf8(out, code_point);
        i += digits;
        break;
      }
      case 'N':
        throw_syntax_error(line, "\\N{...} escapes are not supported in string literals");
      default:
        if (c >= '0' && c <= '7') {
          char32_t code_point = 0;
          size_t k = 0;
          while (k < 3 && i + k < raw.size() && raw[i + k] >= '0' && raw[i + k] <= '7')
            code_point = code_point * 8 + static_cast<char32_t>(raw[i + k++] - '0');
          py::append_utf8(out, code_point);
          i += k - 1;
        } else {
          out.push_back('\\');  // unknown escapes stay as written
          out.push_back(c);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t start = find_tag_start(pos_);
      if (start == std::string::npos) {
        push_text(std::string_view(src_).substr(pos_));
        break;
      }
      const char kind = src_[start + 1];
      size_t after = start + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      size_t raw_body = 0;
      const bool is_raw = kind == '%' && match_raw_begin(after, raw_body);

      const std::string_view text = std::string_view(src_).substr(pos_, start - pos_);
      const int text_newlines = count_newlines(text);
      push_text(strip_before_tag(text, sign, kind == '{'));
      line_ += text_newlines;

      if (kind == '#') {
        lex_comment(after);
      } else if (is_raw) {
        lex_raw(after, raw_body);
      } else {
        lex_tag(kind == '{', after);
      }
    }
    tokens_.push_back(Token{TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t at = src_.find('{', from); at != std::string::npos; at = src_.find('{', at + 1)) {
      if (at + 1 < src_.size() &&
          (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#'))
        return at;
    }
    return std::string::npos;
  }

  bool starts_with(size_t at, std::string_view s) const {
    return std::string_view(src_).substr(at, s.size()) == s;
  }

  size_t skip_space(size_t at) const {
    return at + py::leading_space_bytes(std::string_view(src_).substr(at));
  }

  void push_text(std::string_view text) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::kText, std::string(text), line_});
  }

  // Whitespace control for the text before a tag: `{%-` strips all trailing whitespace;
  // lstrip_blocks strips the indentation before a block or comment tag that starts its line.
  std::string_view strip_before_tag(std::string_view text, char sign, bool is_variable) const {
    if (sign == '-') return text.substr(0, text.size() - py::trailing_space_bytes(text));
    if (sign == '+' || !options_.lstrip_blocks || is_variable) return text;
    const size_t newline = text.rfind('\n');
    const size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
    if (line_start == 0 && !line_starting_) return text;
    const std::string_view indent = text.substr(line_start);
    if (!indent.empty() && py::leading_space_bytes(indent) == indent.size())
      return text.substr(0, line_start);
    return text;
  }

  // After a block or comment end: `-%}` eats all following whitespace, `+%}` nothing, plain
  // `%}` one newline when trim_blocks is on. Returns the new position.
  size_t after_block_end(size_t end_of_delimiter, char sign) const {
    if (sign == '-') return skip_space(end_of_delimiter);
    if (sign != '+' && options_.trim_blocks && end_of_delimiter < src_.size() &&
        src_[end_of_delimiter] == '\n')
      return end_of_delimiter + 1;
    return end_of_delimiter;
  }

  void finish_match(size_t from, size_t to) {
    line_ += count_newlines(std::string_view(src_).substr(from, to - from));
    line_starting_ = to > from && src_[to - 1] == '\n';
    pos_ = to;
  }

  bool match_raw_begin(size_t after, size_t& body) const {
    size_t p = skip_space(after);
    if (!starts_with(p, "raw")) return false;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) {
      body = skip_space(p + 3);
    } else if (starts_with(p, "%}")) {
      body = p + 2;  // jinja2 does not apply trim_blocks to the raw opener
    } else {
      return false;
    }
    return true;
  }

  void lex_comment(size_t after) {
    if (after >= src_.size()) {  // jinja2 quietly accepts a bare "{#" at the very end
      pos_ = after;
      return;
    }
    const size_t close = src_.find("#}", after);
    if (close == std::string::npos) throw_syntax_error(line_, "missing end of comment tag '#}'");
    char sign = 0;
    if (close > after && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    finish_match(after, after_block_end(close + 2, sign));
  }

  void lex_raw(size_t after, size_t body) {
    line_ += count_newlines(std::string_view(src_).substr(after, body - after));
    const int raw_line = line_;
    for (size_t at = src_.find("{%", body); at != std::string::npos; at = src_.find("{%", at + 1)) {
      size_t p = at + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_space(p);
      if (!starts_with(p, "endraw")) continue;
      p = skip_space(p + 6);
      char end_sign = 0;
      if (starts_with(p, "-%}") || starts_with(p, "+%}")) {
        end_sign = src_[p];
        p += 3;
      } else if (starts_with(p, "%}")) {
        p += 2;
      } else {
        continue;
      }
      line_starting_ = body > 0 && src_[body - 1] == '\n';
      const std::string_view text = std::string_view(src_).substr(body, at - body);
      push_text(strip_before_tag(text, sign, false));
      line_ += count_newlines(text);
      finish_match(at, after_block_end(p, end_sign));
      return;
    }
    throw_syntax_error(raw_line, "missing end of raw directive ({% endraw %})");
  }

  void lex_tag(bool is_variable, size_t after) {
    const int begin_line = line_;
    tokens_.push_back(
        Token{is_variable ? TokenType::kVariableBegin : TokenType::kBlockBegin, "", line_});
    size_t p = after;
    std::vector<char> closers;  // brackets opened inside the tag
    while (true) {
      if (p >= src_.size())
        throw_syntax_error(begin_line, is_variable ? "unclosed '{{' (missing '}}')"
                                                   : "unclosed '{%' (missing '%}')");
      if (closers.empty()) {
        size_t end = 0;
        char sign = 0;
        if (is_variable) {
          if (starts_with(p, "-}}"))
            end = skip_space(p + 3);
          else if (starts_with(p, "}}"))
            end = p + 2;
        } else {
          if (starts_with(p, "-%}") || starts_with(p, "+%}"))
            sign = src_[p], end = p + 3;
          else if (starts_with(p, "%}"))
            end = p + 2;
          if (end) end = after_block_end(end, sign);
        }
        if (end) {
          tokens_.push_back(
              Token{is_variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, "", line_});
          finish_match(p, end);
          return;
        }
      }
      const char c = src_[p];
      const size_t space_end = skip_space(p);
      if (space_end > p) {
        line_ += count_newlines(std::string_view(src_).substr(p, space_end - p));
        p = space_end;
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (is_name_start(c)) {
        size_t q = p;
        while (q < src_.size() && is_name_char(src_[q])) ++q;
        tokens_.push_back(Token{TokenType::kName, src_.substr(p, q - p), line_});
        p = q;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        p = lex_operator(p, closers);
      }
    }
  }

  size_t scan_digits(size_t p) const {
    while (p < src_.size() &&
           (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1]))))
      ++p;
    return p;
  }

  size_t lex_number(size_t p) {
    auto digits_only = [](std::string_view s) {
      std::string out;
      for (char c : s)
        if (c != '_') out.push_back(c);
      return out;
    };
    const size_t int_end = scan_digits(p);
    const bool after_dot = p > 0 && src_[p - 1] == '.';  // `x.0.1` is attribute 0, then 1
    if (!after_dot) {
      size_t q = int_end;
      bool is_float = false;
      if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
        q = scan_digits(q + 1);
        is_float = true;
      }
      if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (r < src_.size() && is_digit(src_[r])) {
          q = scan_digits(r);
          is_float = true;
        }
      }
      if (is_float) {
        Token token{TokenType::kFloat, src_.substr(p, q - p), line_};
        token.number = std::strtod(digits_only(token.text).c_str(), nullptr);
        tokens_.push_back(std::move(token));
        return q;
      }
    }
    int base = 10;
    size_t digits_begin = p;
    size_t end = int_end;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char prefix = static_cast<char>(src_[p + 1] | 0x20);
      base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : prefix == 'x' ? 16 : 10;
      if (base != 10) {
        digits_begin = end = p + 2;
        while (end < src_.size() &&
               (src_[end] == '_' || (hex_value(src_[end]) >= 0 && hex_value(src_[end]) < base)))
          ++end;
      }
    }
    Token token{TokenType::kInteger, src_.substr(p, end - p), line_};
    const std::string digits =
        digits_only(std::string_view(src_).substr(digits_begin, end - digits_begin));
    errno = 0;
    char* parsed_end = nullptr;
    token.integer = std::strtoll(digits.c_str(), &parsed_end, base);
    if (digits.empty() || errno == ERANGE || *parsed_end != '\0')
      throw_syntax_error(line_, "invalid integer literal '", token.text, "'");
    tokens_.push_back(std::move(token));
    return end;
  }

  size_t lex_string(size_t p) {
    const char quote = src_[p];
    size_t q = p + 1;
    while (q < src_.size() && src_[q] != quote) q += src_[q] == '\\' ? 2 : 1;
    if (q >= src_.size()) throw_syntax_error(line_, "unterminated string literal");
    const std::string_view raw = std::string_view(src_).substr(p + 1, q - p - 1);
    tokens_.push_back(Token{TokenType::kString, unescape_string(raw, line_), line_});
    line_ += count_newlines(raw);
    return q + 1;
  }

  size_t lex_operator(size_t p, std::vector<char>& closers) {
    static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    static constexpr std::string_view kOneChar = "+-/*%~[](){}><=.:|,;";
    std::string op;
    for (std::string_view two : kTwoChar)
      if (starts_with(p, two)) op = two;
    if (op.empty() && kOneChar.find(src_[p]) != std::string_view::npos) op = src_.substr(p, 1);
    if (op.empty()) {
      std::string shown;
      size_t probe = p;
      py::append_utf8(shown, py::decode(std::string_view(src_).substr(probe, 4)).front());
      throw_syntax_error(line_, "unexpected character '", shown, "' inside a tag");
    }
    if (op == "(" || op == "[" || op == "{") {
      closers.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
    } else if (op == ")" || op == "]" || op == "}") {
      if (closers.empty()) throw_syntax_error(line_, "unexpected '", op, "'");
      if (closers.back() != op[0])
        throw_syntax_error(line_, "unexpected '", op, "', expected '", closers.back(), "'");
      closers.pop_back();
    }
    tokens_.push_back(Token{TokenType::kOperator, op, line_});
    return p + op.size();
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(normalize_newlines(source, options.keep_trailing_newline), options).run();
}

}  // namespace dllm::jinja
