// The library a template can call: filters (`x | trim`), tests (`x is defined`), methods of
// strings, dicts and lists (`s.startswith('a')`), and globals (`range`, `namespace`,
// `raise_exception`, `strftime_now`, `dict`). Semantics follow Python jinja2 as configured by
// Hugging Face transformers (ImmutableSandboxedEnvironment with its own tojson).
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace dllm::jinja {

struct FilterDef {
  std::string_view name;
  Value (*apply)(Interpreter& interpreter, const Value& input, CallArgs& args);
};

struct TestDef {
  std::string_view name;
  bool (*apply)(Interpreter& interpreter, const Value& input, CallArgs& args);
};

// nullptr for names we do not implement; the parser reports those with their line.
const FilterDef* find_filter(std::string_view name);
const TestDef* find_test(std::string_view name);
// A global function by name, or nullopt.
std::optional<Value> find_global(std::string_view name);

// obj.name with jinja2's sandboxed lookup order: a (safe) method, else a dict key, else an
// undefined value that remembers why.
Value get_attribute(const Value& object, std::string_view name);
// obj[key]: item lookup first, then attribute lookup for string keys, else undefined.
Value get_item(const Value& object, const Value& key);
// obj[start:stop:step] on strings, lists and tuples (Python slice semantics).
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// Binds call arguments to named parameters like a Python signature:
// BoundArgs a("round", args, {"value", "precision", "method"}, 1);
class BoundArgs {
 public:
  BoundArgs(std::string_view function, CallArgs& args,
            std::initializer_list<std::string_view> names, size_t required = 0);
  bool has(size_t i) const { return slots_[i].has_value(); }
  const Value& operator[](size_t i) const { return *slots_[i]; }
  Value get_or(size_t i, Value fallback) const { return has(i) ? *slots_[i] : fallback; }
  // Typed access with a clear error naming the function and parameter.
  int64_t int_or(size_t i, int64_t fallback) const;
  bool bool_or(size_t i, bool fallback) const;
  std::optional<std::string> string_opt(size_t i) const;  // nullopt when absent or None

 private:
  std::string function_;
  std::vector<std::string_view> names_;
  std::vector<std::optional<Value>> slots_;
};

}  // namespace dllm::jinja
