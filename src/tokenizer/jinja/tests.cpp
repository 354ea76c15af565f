// Tests (`value is name(args)`), with jinja2's names and aliases.
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/py_string.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

namespace {

bool t_defined(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("defined", args, {});
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("undefined", args, {});
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("none", args, {});
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("boolean", args, {});
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("true", args, {});
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("false", args, {});
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("integer", args, {});
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("float", args, {});
  return v.is_float();
}
bool t_number(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("number", args, {});
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("string", args, {});
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("mapping", args, {});
  return v.is_mapping();
}
// Python's Undefined supports iter() and len(), so it counts as iterable and as a sequence.
bool t_iterable(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("iterable", args, {});
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
}
bool t_sequence(Interpreter& i, const Value& v, CallArgs& args) {
  return t_iterable(i, v, args);
}
bool t_callable(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("callable", args, {});
  return v.is_function() || v.is_undefined();  // Python's Undefined defines __call__ (to fail)
}
// jinja2: value % 2 == 1 (odd) / == 0 (even), so floats are accepted too.
bool t_odd(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("odd", args, {});
  return equals(binary_operation(BinaryExpr::Op::kMod, v, Value(2)), Value(1));
}
bool t_even(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("even", args, {});
  return equals(binary_operation(BinaryExpr::Op::kMod, v, Value(2)), Value(0));
}
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("divisibleby", args, {"num"}, 1);
  const Value remainder = binary_operation(BinaryExpr::Op::kMod, v, a[0]);
  return remainder.number() == 0;
}
bool t_lower(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("lower", args, {});
  return py::is_cased_lower(to_str(v));
}
bool t_upper(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("upper", args, {});
  return py::is_cased_upper(to_str(v));
}
bool t_eq(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("eq", args, {"other"}, 1);
  return equals(v, a[0]);
}
bool t_ne(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("ne", args, {"other"}, 1);
  return !equals(v, a[0]);
}
bool t_lt(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("lt", args, {"other"}, 1);
  return compare(v, a[0], "<") < 0;
}
bool t_le(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("le", args, {"other"}, 1);
  return compare(v, a[0], "<=") <= 0;
}
bool t_gt(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("gt", args, {"other"}, 1);
  return compare(v, a[0], ">") > 0;
}
bool t_ge(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("ge", args, {"other"}, 1);
  return compare(v, a[0], ">=") >= 0;
}
bool t_in(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("in", args, {"seq"}, 1);
  return contains(a[0], v);
}
// Python `is`: the same object for containers, the same value for immutable scalars.
bool t_sameas(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("sameas", args, {"other"}, 1);
  const Value& other = a[0];
  if (v.kind() != other.kind()) return false;
  if (v.is_list()) return v.list_ptr() == other.list_ptr();
  if (v.is_dict()) return v.dict_ptr() == other.dict_ptr();
  if (v.is_function()) return &v.as_function() == &other.as_function();
  return equals(v, other);
}

constexpr TestDef kTests[] = {
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"boolean", t_boolean},
    {"true", t_true},
    {"false", t_false},
    {"integer", t_integer},
    {"float", t_float},
    {"number", t_number},
    {"string", t_string},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"callable", t_callable},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"lower", t_lower},
    {"upper", t_upper},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<", t_lt},
    {"le", t_le},
    {"<=", t_le},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"in", t_in},
    {"sameas", t_sameas},
};

}  // namespace

const TestDef* find_test(std::string_view name) {
  for (const TestDef& test : kTests)
    if (test.name == name) return &test;
  return nullptr;
}

}  // namespace dllm::jinja
