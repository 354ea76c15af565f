#include "tokenizer/jinja/template.h"

#include "core/error.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/scopes.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

Template::Template(std::string_view source, std::string name) : name_(std::move(name)) {
  try {
    auto body = std::make_shared<Body>(parse(tokenize(source)));
    root_undefined_ = analyze_scopes(*body);
    body_ = std::move(body);
  } catch (const TemplateError& e) {
    fail(name_, " line ", e.line(), ": ", e.what());
  }
}

std::string Template::render(const Value& variables) const {
  if (!variables.is_mapping()) fail(name_, ": template variables must be a dict");
  Interpreter interpreter(variables);
  try {
    return interpreter.render(*body_, root_undefined_);
  } catch (const TemplateError& e) {
    fail(name_, " line ", e.line() ? e.line() : interpreter.line(), ": ", e.what());
  }
}

std::string Template::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object()) fail(name_, ": template variables must be a JSON object");
  Value values;
  try {
    values = from_json(variables);
  } catch (const TemplateError& e) {
    fail(name_, ": template variables: ", e.what());
  }
  return render(values);
}

}  // namespace dllm::jinja
