// Global functions a template can call, and argument binding shared by all built-ins.
#include <algorithm>
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/limits.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

BoundArgs::BoundArgs(std::string_view function, CallArgs& args,
                     std::initializer_list<std::string_view> names, size_t required)
    : function_(function), names_(names), slots_(names.size()) {
  if (args.positional.size() > names_.size())
    throw_error(function_, "() takes at most ", names_.size(), " argument(s) (",
                args.positional.size(), " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) slots_[i] = args.positional[i];
  for (auto& [key, value] : args.keyword) {
    const auto it = std::find(names_.begin(), names_.end(), key);
    if (it == names_.end())
      throw_error(function_, "() got an unexpected keyword argument '", key, "'");
    auto& slot = slots_[static_cast<size_t>(it - names_.begin())];
    if (slot) throw_error(function_, "() got multiple values for argument '", key, "'");
    slot = value;
  }
  for (size_t i = 0; i < required; ++i)
    if (!slots_[i]) throw_error(function_, "() missing required argument '", names_[i], "'");
}

int64_t BoundArgs::int_or(size_t i, int64_t fallback) const {
  if (!has(i) || (*slots_[i]).is_none()) return fallback;
  const Value& v = *slots_[i];
  if (v.is_undefined()) throw_undefined(v);
  if (!v.is_integral())
    throw_error(function_, "() argument '", names_[i], "' must be an integer, not ", type_name(v));
  return v.integral();
}

bool BoundArgs::bool_or(size_t i, bool fallback) const {
  return has(i) ? truthy(*slots_[i]) : fallback;
}

std::optional<std::string> BoundArgs::string_opt(size_t i) const {
  if (!has(i) || (*slots_[i]).is_none()) return std::nullopt;
  const Value& v = *slots_[i];
  if (v.is_undefined()) throw_undefined(v);
  if (!v.is_string())
    throw_error(function_, "() argument '", names_[i], "' must be str or None, not ", type_name(v));
  return v.as_string();
}

namespace {

Value range(Interpreter&, CallArgs& args) {
  if (!args.keyword.empty()) throw_error("range() takes no keyword arguments");
  BoundArgs a("range", args, {"start", "stop", "step"}, 1);
  int64_t start = 0, stop = 0, step = 1;
  if (args.positional.size() == 1) {
    stop = a.int_or(0, 0);
  } else {
    start = a.int_or(0, 0);
    stop = a.int_or(1, 0);
    step = a.int_or(2, 1);
  }
  if (step == 0) throw_error("range() arg 3 must not be zero");
  // Overflow-checked: range(-2**63, 2**63 - 1) must be refused, not wrap.
  int64_t span = 0;
  const bool overflow = step > 0 ? __builtin_sub_overflow(stop, start, &span)
                                 : __builtin_sub_overflow(start, stop, &span);
  const uint64_t stride = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
  const int64_t count = overflow ? kMaxRange + 1
                        : span <= 0
                            ? 0
                            : static_cast<int64_t>((static_cast<uint64_t>(span) - 1) / stride + 1);
  if (count > kMaxRange)
    throw_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange,
                "): template limit max_range exceeded");
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) items.emplace_back(start + i * step);
  return make_list(std::move(items));
}

// dict(mapping_or_pairs, **kwargs) and namespace(...) share Python's dict() construction.
// Each insertion scans the dict (DictData is a small ordered vector): charge that scan.
void fill_dict(Interpreter& interpreter, DictData& dict, CallArgs& args,
               std::string_view function) {
  auto set = [&](const Value& key, const Value& value) {
    interpreter.charge_steps(static_cast<int64_t>(dict.entries.size()) + 1);
    dict.set(key, value);
  };
  if (args.positional.size() > 1)
    throw_error(function, "() expected at most 1 positional argument, got ",
                args.positional.size());
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_mapping()) {
      for (const auto& [key, value] : source.as_dict().entries) set(key, value);
    } else {
      for (const Value& pair : iterate(source)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) throw_error(function, "(): sequence elements must have length 2");
        set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [key, value] : args.keyword) set(Value(key), value);
}

Value dict(Interpreter& interpreter, CallArgs& args) {
  Value result = make_dict();
  fill_dict(interpreter, result.as_dict(), args, "dict");
  return result;
}

Value make_namespace(Interpreter& interpreter, CallArgs& args) {
  Value result = make_dict();
  result.as_dict().is_namespace = true;
  fill_dict(interpreter, result.as_dict(), args, "namespace");
  for (const auto& [key, value] : result.as_dict().entries)
    if (key.is_string() && !key.as_string().empty() && key.as_string().front() == '_')
      throw_error("chat templates cannot store underscore-prefixed attributes on a namespace ('",
                  key.as_string(), "')");
  return result;
}

Value raise_exception(Interpreter&, CallArgs& args) {
  BoundArgs a("raise_exception", args, {"message"}, 1);
  throw_error(to_str(a[0]));
}

Value strftime_now(Interpreter&, CallArgs& args) {
  BoundArgs a("strftime_now", args, {"format"}, 1);
  const std::optional<std::string> format = a.string_opt(0);
  if (!format) throw_error("strftime_now() needs a format string");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buffer(256 + format->size() * 8, '\0');
  const size_t n = std::strftime(buffer.data(), buffer.size(), format->c_str(), &local);
  buffer.resize(n);
  return Value(std::move(buffer));
}

Value unsupported(std::string name) {
  return make_function(name, [name](Interpreter&, CallArgs&) -> Value {
    throw_error("unsupported function '", name, "'");
  });
}

}  // namespace

std::optional<Value> find_global(std::string_view name) {
  if (name == "range") return make_function("range", range);
  if (name == "dict") return make_function("dict", dict);
  if (name == "namespace") return make_function("namespace", make_namespace);
  if (name == "raise_exception") return make_function("raise_exception", raise_exception);
  if (name == "strftime_now") return make_function("strftime_now", strftime_now);
  if (name == "lipsum" || name == "cycler" || name == "joiner")
    return unsupported(std::string(name));
  return std::nullopt;
}

}  // namespace dllm::jinja
