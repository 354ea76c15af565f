// jinja2's static scoping rule, which templates can observe: in each frame (the template, a loop
// body, a macro, a `with`, a block `set`, a filter block), a name whose first mention in that
// frame is an assignment outside any `if`, and that no enclosing frame mentions, starts out
// undefined in the frame instead of falling back to the template variables. E.g. with a=10 passed
// in, "{% for i in [1] %}{{ a }}{% endfor %}{% set a = 5 %}" renders "" in jinja2, not "10".
#pragma once

#include "tokenizer/jinja/ast.h"

namespace dllm::jinja {

// Fills the FrameLocals of every nested frame and returns those of the template's root frame.
FrameLocals analyze_scopes(Body& root);

}  // namespace dllm::jinja
