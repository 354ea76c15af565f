// A small Jinja2 interpreter for chat templates: the subset of Python jinja2 that Hugging Face
// chat templates use, rendered with the settings transformers uses (trim_blocks, lstrip_blocks,
// loop controls, raise_exception, strftime_now, its own tojson). Anything outside that subset is
// refused with an error naming the construct and its template line.
//
//   jinja::Template t("{{ greeting }}, {{ name | upper }}!", "greeting template");
//   t.render(nlohmann::ordered_json{{"greeting", "Hello"}, {"name", "world"}});  // "Hello, WORLD!"
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace dllm::jinja {

class Template {
 public:
  // Parses `source`. `name` starts every error message: "<name> line 12: unsupported tag
  // 'include'". Throws dllm::Error on syntax errors.
  Template(std::string_view source, std::string name);

  // Renders with the entries of `variables` (a dict value / JSON object) as template variables.
  // Throws dllm::Error naming the template line on any runtime error, including
  // raise_exception(message), whose message is kept verbatim.
  std::string render(const Value& variables) const;
  std::string render(const nlohmann::ordered_json& variables) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const Body> body_;
  FrameLocals root_undefined_;
};

}  // namespace dllm::jinja
