// The one exception type inside the Jinja interpreter. Lexer and parser errors carry their template
// line; runtime errors raised deep inside value helpers carry none, and the interpreter fills in
// the line of the node it was evaluating. jinja::Template turns it into a dllm::Error at its
// boundary.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "core/error.h"

namespace dllm::jinja {

// A dllm::Error, so that one escaping without its line is still reported cleanly.
class TemplateError : public Error {
 public:
  explicit TemplateError(const std::string& message, int line = 0) : Error(message), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

// throw_error("cannot add ", a, " and ", b): a runtime error without a line (the interpreter adds
// it).
template <class... Args>
[[noreturn]] void throw_error(Args&&... args) {
  throw TemplateError(cat(std::forward<Args>(args)...));
}

// A syntax error at a known template line.
template <class... Args>
[[noreturn]] void throw_syntax_error(int line, Args&&... args) {
  throw TemplateError(cat(std::forward<Args>(args)...), line);
}

}  // namespace dllm::jinja
