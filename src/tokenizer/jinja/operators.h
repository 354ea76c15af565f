// Python semantics of the template operators: + - * / // % ** ~ and `in`.
#pragma once

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace dllm::jinja {

// Every arithmetic operator and ~ (not `and` / `or`, which short-circuit in the interpreter).
Value binary_operation(BinaryExpr::Op op, const Value& a, const Value& b);
Value negate(const Value& v);
// `item in container`.
bool contains(const Value& container, const Value& item);

}  // namespace dllm::jinja
