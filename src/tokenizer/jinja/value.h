// Values of the Jinja interpreter, with Python semantics: templates are written against Python's
// jinja2, so truthiness, equality, ordering, str() and repr() of every value follow Python.
// Lists and dicts are shared by reference, as in Python (a namespace is a dict with a flag).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace dllm::jinja {

class Value;
class Interpreter;
struct ListData;
struct DictData;
struct Function;
using ListPtr = std::shared_ptr<ListData>;
using DictPtr = std::shared_ptr<DictData>;
using FunctionPtr = std::shared_ptr<const Function>;

// jinja2's default Undefined: falsy, renders empty, iterates as empty; any other use raises an
// error carrying `message` ("'x' is undefined", "'dict object' has no attribute 'y'").
struct Undefined {
  std::string message;
};
struct None {};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() : data_(Undefined{}) {}
  static Value undefined(std::string message) { return Value(Undefined{std::move(message)}); }
  static Value none() { return Value(None{}); }
  Value(bool b) : data_(b) {}
  Value(int i) : data_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : data_(i) {}
  Value(double f) : data_(f) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(std::string_view s) : data_(std::string(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(ListPtr list) : data_(std::move(list)) {}
  Value(DictPtr dict) : data_(std::move(dict)) {}
  Value(FunctionPtr function) : data_(std::move(function)) {}

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // Python numbers include bool.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  // bool or int (Python's int, of which bool is a subclass).
  bool is_integral() const { return is_bool() || is_int(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const;
  bool is_mapping() const { return is_dict() && !is_namespace(); }
  bool is_function() const { return kind() == Kind::kFunction; }

  const std::string& undefined_message() const { return std::get<Undefined>(data_).message; }
  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // bool/int as int64 (Python's int(True) == 1).
  int64_t integral() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }
  // Any number as double.
  double number() const { return is_float() ? as_float() : static_cast<double>(integral()); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  ListData& as_list() const { return *std::get<ListPtr>(data_); }
  DictData& as_dict() const { return *std::get<DictPtr>(data_); }
  const Function& as_function() const { return *std::get<FunctionPtr>(data_); }
  const ListPtr& list_ptr() const { return std::get<ListPtr>(data_); }
  const DictPtr& dict_ptr() const { return std::get<DictPtr>(data_); }

 private:
  explicit Value(Undefined u) : data_(std::move(u)) {}
  explicit Value(None n) : data_(n) {}

  std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr, DictPtr, FunctionPtr>
      data_;
};

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes repr(): ('a', 1)
};

// Insertion-ordered like a Python dict. Chat-template dicts are small, so lookup is a scan.
struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  bool is_namespace = false;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  const Value* find(const std::string& key) const { return find(std::string_view(key)); }
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  void set(const Value& key, Value value);
};

// Arguments of a call: f(1, 2, name=3).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Anything callable from a template: globals (range, namespace, ...), bound methods ("a".split),
// macros. `name` appears in error messages.
struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
};

Value make_list(std::vector<Value> items = {}, bool is_tuple = false);
Value make_dict();
Value make_function(std::string name, std::function<Value(Interpreter&, CallArgs&)> call);

// Python's type name, for error messages: 'str', 'int', 'list', 'dict', 'NoneType', ...
std::string type_name(const Value& v);
// jinja2's "object type repr" used in undefined messages: "dict object", "None".
std::string object_description(const Value& v);

// Raises the error an undefined value carries (the caller checked is_undefined()).
[[noreturn]] void throw_undefined(const Value& v);

bool truthy(const Value& v);
// Python ==: numbers compare across bool/int/float, containers compare element-wise.
bool equals(const Value& a, const Value& b);
// Python ordering for <, <=, >, >=; errors for unorderable types, naming `op`.
int compare(const Value& a, const Value& b, std::string_view op);
// Python str(): what {{ value }} renders. Undefined renders as "".
std::string to_str(const Value& v);
// Python repr().
std::string repr(const Value& v);
// Python repr() of a float: shortest round-trip digits, "1.0", "1e+16", "nan", "inf".
std::string format_float(double f);

// Iterates like Python's iter(): list items, dict keys, string characters; undefined is empty.
std::vector<Value> iterate(const Value& v);
// Python len(); errors for values without one.
int64_t length(const Value& v);

// JSON input (messages, tools, extra variables) as template values; object key order is kept.
Value from_json(const nlohmann::ordered_json& json);

// Python json.dumps(value, ensure_ascii=..., indent=..., separators=..., sort_keys=...), which is
// what Hugging Face's `tojson` filter calls.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // already expanded: an int indent becomes that many spaces
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace dllm::jinja
