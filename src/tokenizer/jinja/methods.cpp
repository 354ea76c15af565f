// Attribute, item and slice access, and the methods of str, dict and list that templates call.
#include <algorithm>
#include <cctype>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/limits.h"
#include "tokenizer/jinja/py_string.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

namespace {

std::string require_string(const Value& v, std::string_view function, std::string_view parameter) {
  if (v.is_undefined()) throw_undefined(v);
  if (!v.is_string())
    throw_error(function, "() argument '", parameter, "' must be str, not ", type_name(v));
  return v.as_string();
}

// startswith / endswith accept a string or a tuple of strings.
Value affix_test(const Value& self, CallArgs& args, std::string_view name, bool prefix) {
  BoundArgs a(name, args, {"affix"}, 1);
  std::vector<Value> candidates = a[0].is_list() ? a[0].as_list().items : std::vector<Value>{a[0]};
  const std::string& s = self.as_string();
  for (const Value& candidate : candidates) {
    const std::string affix = require_string(candidate, name, "affix");
    if (affix.size() <= s.size() &&
        (prefix ? s.compare(0, affix.size(), affix) == 0
                : s.compare(s.size() - affix.size(), affix.size(), affix) == 0))
      return Value(true);
  }
  return Value(false);
}

Value strings_to_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& part : parts) items.emplace_back(std::move(part));
  return make_list(std::move(items));
}

Value str_split(const Value& self, CallArgs& args, bool from_right) {
  BoundArgs a(from_right ? "rsplit" : "split", args, {"sep", "maxsplit"});
  const std::optional<std::string> sep = a.string_opt(0);
  const int64_t maxsplit = a.int_or(1, -1);
  return strings_to_list(from_right ? py::rsplit(self.as_string(), sep, maxsplit)
                                    : py::split(self.as_string(), sep, maxsplit));
}

Value str_strip(const Value& self, CallArgs& args, std::string_view name, bool left, bool right) {
  BoundArgs a(name, args, {"chars"});
  return Value(py::strip(self.as_string(), a.string_opt(0), left, right));
}

Value str_no_args(const Value& self, CallArgs& args, std::string_view name,
                  std::string (*transform)(std::string_view)) {
  BoundArgs a(name, args, {});
  return Value(transform(self.as_string()));
}

Value str_predicate(const Value& self, CallArgs& args, std::string_view name,
                    bool (*predicate)(char32_t)) {
  BoundArgs a(name, args, {});
  return Value(py::all_of_class(self.as_string(), predicate));
}

Value str_find(const Value& self, CallArgs& args, std::string_view name) {
  BoundArgs a(name, args, {"sub"}, 1);
  const std::string sub = require_string(a[0], name, "sub");
  const int64_t at = name == "find" || name == "index" ? py::find(self.as_string(), sub)
                                                       : py::rfind(self.as_string(), sub);
  if (at < 0 && (name == "index" || name == "rindex")) throw_error("substring not found");
  return Value(at);
}

Value str_join(const Value& self, CallArgs& args) {
  BoundArgs a("join", args, {"iterable"}, 1);
  std::string out;
  size_t i = 0;
  for (const Value& item : iterate(a[0])) {
    if (!item.is_string())
      throw_error("sequence item ", i, ": expected str instance, ", type_name(item), " found");
    check_string_bytes(uint64_t{out.size()} + self.as_string().size() + item.as_string().size(),
                       "the result of str.join()");
    if (i++) out += self.as_string();
    out += item.as_string();
  }
  return Value(std::move(out));
}

// str.format with automatic ({}), numbered ({0}) and named ({name}) fields; no format specs.
Value str_format(const Value& self, CallArgs& args) {
  const std::string& s = self.as_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '}') {
      if (i + 1 < s.size() && s[i + 1] == '}')
        ++i;
      else
        throw_error("Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (s[i] != '{') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = s.find('}', i);
    if (close == std::string::npos) throw_error("Single '{' encountered in format string");
    const std::string field = s.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      throw_error("str.format: format specs, conversions and field access are not supported");
    const Value* value = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      // More digits than any argument count: out of range (std::stoul would throw instead).
      const size_t index = field.empty()      ? auto_index++
                           : field.size() > 9 ? SIZE_MAX
                                              : std::stoul(field);
      if (index >= args.positional.size())
        throw_error("str.format: replacement index ", field.empty() ? std::to_string(index) : field,
                    " out of range");
      value = &args.positional[index];
    } else {
      for (const auto& [key, v] : args.keyword)
        if (key == field) value = &v;
      if (!value) throw_error("str.format: missing keyword argument '", field, "'");
    }
    out += to_str(*value);
    i = close;
  }
  return Value(std::move(out));
}

Value call_str_method(std::string_view name, const Value& self, CallArgs& args) {
  const std::string& s = self.as_string();
  if (name == "startswith") return affix_test(self, args, name, true);
  if (name == "endswith") return affix_test(self, args, name, false);
  if (name == "split") return str_split(self, args, false);
  if (name == "rsplit") return str_split(self, args, true);
  if (name == "strip") return str_strip(self, args, name, true, true);
  if (name == "lstrip") return str_strip(self, args, name, true, false);
  if (name == "rstrip") return str_strip(self, args, name, false, true);
  if (name == "upper") return str_no_args(self, args, name, py::upper);
  if (name == "lower") return str_no_args(self, args, name, py::lower);
  if (name == "title") return str_no_args(self, args, name, py::title);
  if (name == "capitalize") return str_no_args(self, args, name, py::capitalize);
  if (name == "isalpha") return str_predicate(self, args, name, py::is_alpha);
  if (name == "isdigit") return str_predicate(self, args, name, py::is_digit);
  if (name == "isalnum") return str_predicate(self, args, name, py::is_alnum);
  if (name == "isspace") return str_predicate(self, args, name, py::is_space);
  if (name == "isupper" || name == "islower") {
    BoundArgs a(name, args, {});
    return Value(name == "isupper" ? py::is_cased_upper(s) : py::is_cased_lower(s));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex")
    return str_find(self, args, name);
  if (name == "count") {
    BoundArgs a(name, args, {"sub"}, 1);
    return Value(py::count(s, require_string(a[0], name, "sub")));
  }
  if (name == "replace") {
    BoundArgs a(name, args, {"old", "new", "count"}, 2);
    return Value(py::replace(s, require_string(a[0], name, "old"),
                             require_string(a[1], name, "new"), a.int_or(2, -1)));
  }
  if (name == "join") return str_join(self, args);
  if (name == "splitlines") {
    BoundArgs a(name, args, {"keepends"});
    return strings_to_list(py::splitlines(s, a.bool_or(0, false)));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    BoundArgs a(name, args, {"affix"}, 1);
    const std::string affix = require_string(a[0], name, "affix");
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0)
      return Value(s.substr(affix.size()));
    if (name == "removesuffix" && affix.size() <= s.size() && !affix.empty() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0)
      return Value(s.substr(0, s.size() - affix.size()));
    return self;
  }
  if (name == "format") return str_format(self, args);
  throw_error("unsupported string method '", name, "'");
}

// Every method of Python's str: those we lack fail clearly when called instead of looking like
// a missing attribute.
constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
constexpr std::string_view kUnsafeDictMethods[] = {"clear",      "pop",    "popitem",
                                                   "setdefault", "update", "fromkeys"};
constexpr std::string_view kUnsafeListMethods[] = {"append", "clear",  "extend",  "insert",
                                                   "pop",    "remove", "reverse", "sort"};

template <size_t N>
bool in(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value bind_method(const Value& self, std::string_view type, std::string_view name,
                  Value (*method)(std::string_view, const Value&, CallArgs&)) {
  return make_function(cat(type, ".", name),
                       [self, name = std::string(name), method](Interpreter&, CallArgs& args) {
                         return method(name, self, args);
                       });
}

Value call_dict_method(std::string_view name, const Value& self, CallArgs& args) {
  const DictData& dict = self.as_dict();
  if (name == "get") {
    BoundArgs a(name, args, {"key", "default"}, 1);
    const Value* found = dict.find(a[0]);
    return found ? *found : a.get_or(1, Value::none());
  }
  BoundArgs a(name, args, {});
  std::vector<Value> items;
  if (name == "copy") {
    Value copy = make_dict();
    copy.as_dict().entries = dict.entries;
    return copy;
  }
  for (const auto& [key, value] : dict.entries) {
    if (name == "keys")
      items.push_back(key);
    else if (name == "values")
      items.push_back(value);
    else
      items.push_back(make_list({key, value}, true));
  }
  return make_list(std::move(items));
}

Value call_list_method(std::string_view name, const Value& self, CallArgs& args) {
  const auto& items = self.as_list().items;
  if (name == "copy") {
    BoundArgs a(name, args, {});
    return make_list(items, self.as_list().is_tuple);
  }
  BoundArgs a(name, args, {"value"}, 1);
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!equals(items[i], a[0])) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") throw_error(repr(a[0]), " is not in list");
  return Value(count);
}

Value unsafe(const Value& object, std::string_view name) {
  return Value::undefined(
      cat("access to attribute '", name, "' of '", type_name(object), "' object is unsafe."));
}

Value no_attribute(const Value& object, std::string_view name) {
  return Value::undefined(cat("'", object_description(object), "' has no attribute '", name, "'"));
}

Value no_element(const Value& object, const Value& key) {
  return Value::undefined(cat(object_description(object), " has no element ", repr(key)));
}

// Python slice index normalisation (PySlice_AdjustIndices).
std::vector<size_t> slice_positions(int64_t length, const Value& start_v, const Value& stop_v,
                                    const Value& step_v) {
  auto index = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.is_undefined()) throw_undefined(v);
    if (!v.is_integral()) throw_error("slice indices must be integers or None");
    return v.integral();
  };
  const int64_t step = index(step_v).value_or(1);
  if (step == 0) throw_error("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> i, int64_t fallback) {
    if (!i) return fallback;
    int64_t v = *i;
    if (v < 0) {
      v += length;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= length) {
      v = step < 0 ? length - 1 : length;
    }
    return v;
  };
  const int64_t start = adjust(index(start_v), step < 0 ? length - 1 : 0);
  const int64_t stop = adjust(index(stop_v), step < 0 ? -1 : length);
  std::vector<size_t> positions;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    positions.push_back(static_cast<size_t>(i));
  return positions;
}

}  // namespace

Value get_attribute(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      throw_undefined(object);
    case Value::Kind::kString:
      if (in(kStrMethods, name)) return bind_method(object, "str", name, call_str_method);
      break;
    case Value::Kind::kDict:
      if (object.is_namespace()) {
        if (const Value* value = object.as_dict().find(name)) return *value;
        break;
      }
      if (name == "get" || name == "items" || name == "keys" || name == "values" || name == "copy")
        return bind_method(object, "dict", name, call_dict_method);
      if (in(kUnsafeDictMethods, name)) return unsafe(object, name);
      if (const Value* value = object.as_dict().find(name)) return *value;
      break;
    case Value::Kind::kList:
      if (name == "count" || name == "index" || name == "copy")
        return bind_method(object, object.as_list().is_tuple ? "tuple" : "list", name,
                           call_list_method);
      if (in(kUnsafeListMethods, name)) return unsafe(object, name);
      break;
    default:
      break;
  }
  return no_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      throw_undefined(object);
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.is_integral()) {
        const int64_t n = length(object);
        int64_t i = key.integral();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return no_element(object, key);
        if (object.is_list()) return object.as_list().items[static_cast<size_t>(i)];
        const std::u32string cps = py::decode(object.as_string());
        std::string one;
        py::append_utf8(one, cps[static_cast<size_t>(i)]);
        return Value(std::move(one));
      }
      break;
    case Value::Kind::kDict:
      if (!object.is_namespace())
        if (const Value* value = object.as_dict().find(key)) return *value;
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return no_element(object, key);
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined()) throw_undefined(object);
  if (object.is_string()) {
    const std::string& s = object.as_string();
    const bool ascii = py::is_ascii(s);
    const std::u32string cps = ascii ? std::u32string() : py::decode(s);
    const auto n = static_cast<int64_t>(ascii ? s.size() : cps.size());
    std::string out;
    for (size_t i : slice_positions(n, start, stop, step)) {
      if (ascii)
        out.push_back(s[i]);
      else
        py::append_utf8(out, cps[i]);
    }
    return Value(std::move(out));
  }
  if (object.is_list()) {
    const auto& items = object.as_list().items;
    std::vector<Value> out;
    for (size_t i : slice_positions(static_cast<int64_t>(items.size()), start, stop, step))
      out.push_back(items[i]);
    return make_list(std::move(out), object.as_list().is_tuple);
  }
  // jinja2 slices with plain Python subscription, so these are type errors (not undefined).
  if (object.is_mapping()) throw_error("unhashable type: 'slice'");
  throw_error("'", type_name(object), "' object is not subscriptable");
}

}  // namespace dllm::jinja
