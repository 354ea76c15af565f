// Turns tokens into a syntax tree with jinja2's grammar and operator precedence. Constructs that
// Hugging Face chat templates do not need (include, import, extends, block, call, ...) are
// refused with "unsupported tag 'include'" and the line, rather than misread.
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace dllm::jinja {

// Throws TemplateError with the line of the offending token.
Body parse(std::vector<Token> tokens);

}  // namespace dllm::jinja
