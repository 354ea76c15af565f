// Splits template source into tokens the way jinja2's lexer does with the settings Hugging Face
// uses (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False): text between tags,
// `{{ }}` / `{% %}` delimiters, and the names, literals and operators inside them. Comments and
// `{% raw %}` are resolved here; whitespace control (`-`, `+`) is applied to the text tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dllm::jinja {

enum class TokenType {
  kText,           // literal template text
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifiers and keywords (if, for, in, not, true, ...)
  kString,         // text holds the unescaped value
  kInteger,        // integer holds the value
  kFloat,          // number holds the value
  kOperator,       // text holds the operator: + - * / // % ** ~ ( ) [ ] { } . , : | = == ...
  kEnd,            // end of the template
};

struct Token {
  TokenType type;
  std::string text;
  int line = 1;
  int64_t integer = 0;
  double number = 0;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateError (with the line) on malformed input: an unclosed comment or string, an
// unexpected character inside a tag, unbalanced brackets.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace dllm::jinja
