#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "tokenizer/jinja/limits.h"
#include "tokenizer/jinja/py_string.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

namespace {

// Containers nest only as deep as their JSON input, but a namespace can hold itself.
constexpr int kMaxNesting = 512;

void check_nesting(int depth) {
  if (depth > kMaxNesting) throw_error("value nested too deeply (circular reference?)");
}

std::string repr_at(const Value& v, int depth);

std::string repr_sequence(const ListData& list, int depth) {
  std::string out = list.is_tuple ? "(" : "[";
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (i) out += ", ";
    out += repr_at(list.items[i], depth + 1);
    // Lists share their items, so a few assignments can describe a huge tree: bound the text.
    check_string_bytes(out.size(), "the text of a list");
  }
  if (list.is_tuple && list.items.size() == 1) out += ",";
  out += list.is_tuple ? ")" : "]";
  return out;
}

std::string repr_mapping(const DictData& dict, int depth) {
  std::string out = "{";
  for (size_t i = 0; i < dict.entries.size(); ++i) {
    if (i) out += ", ";
    out += repr_at(dict.entries[i].first, depth + 1);
    out += ": ";
    out += repr_at(dict.entries[i].second, depth + 1);
    check_string_bytes(out.size(), "the text of a dict");
  }
  return out + "}";
}

std::string repr_at(const Value& v, int depth) {
  check_nesting(depth);
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kString:
      return py::repr(v.as_string());
    case Value::Kind::kList:
      return repr_sequence(v.as_list(), depth);
    case Value::Kind::kDict:
      if (v.is_namespace()) return "<Namespace " + repr_mapping(v.as_dict(), depth) + ">";
      return repr_mapping(v.as_dict(), depth);
    default:
      return to_str(v);
  }
}

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char* kHex = "0123456789abcdef";
  auto unicode_escape = [&](char32_t c) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out.push_back(kHex[(c >> shift) & 0xF]);
  };
  out.push_back('"');
  for (char32_t c : py::decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        unicode_escape(0xD800 | (v >> 10));
        unicode_escape(0xDC00 | (v & 0x3FF));
      } else {
        unicode_escape(c);
      }
    } else {
      py::append_utf8(out, c);
    }
  }
  out.push_back('"');
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return format_float(f);
}

std::string json_key(const Value& key, bool ensure_ascii) {
  std::string out;
  switch (key.kind()) {
    case Value::Kind::kString:
      json_string(out, key.as_string(), ensure_ascii);
      return out;
    case Value::Kind::kBool:
      return key.as_bool() ? "\"true\"" : "\"false\"";
    case Value::Kind::kInt:
      json_string(out, std::to_string(key.as_int()), false);
      return out;
    case Value::Kind::kFloat:
      json_string(out, json_float(key.as_float()), false);
      return out;
    case Value::Kind::kNone:
      return "\"null\"";
    default:
      throw_error("keys must be str, int, float, bool or None, not ", type_name(key));
  }
}

void json_dump(std::string& out, const Value& v, const JsonDumpOptions& options, int level) {
  check_nesting(level);
  const std::string item_separator =
      options.separators ? options.separators->first : (options.indent ? "," : ", ");
  const std::string key_separator = options.separators ? options.separators->second : ": ";
  auto newline_indent = [&](int n) {
    check_string_bytes(uint64_t{out.size()} + 1 + uint64_t(n) * options.indent->size(),
                       "the result of tojson()");
    out.push_back('\n');
    for (int i = 0; i < n; ++i) out += *options.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat:
      out += json_float(v.as_float());
      return;
    case Value::Kind::kString:
      json_string(out, v.as_string(), options.ensure_ascii);
      return;
    case Value::Kind::kList: {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_separator;
        if (options.indent) newline_indent(level + 1);
        json_dump(out, items[i], options, level + 1);
        check_string_bytes(out.size(), "the result of tojson()");
      }
      if (options.indent) newline_indent(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : v.as_dict().entries) entries.push_back(&entry);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
          return compare(a->first, b->first, "<") < 0;
        });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_separator;
        if (options.indent) newline_indent(level + 1);
        out += json_key(entries[i]->first, options.ensure_ascii);
        out += key_separator;
        json_dump(out, entries[i]->second, options, level + 1);
        check_string_bytes(out.size(), "the result of tojson()");
      }
      if (options.indent) newline_indent(level);
      out.push_back('}');
      return;
    }
    default:
      break;
  }
  throw_error("Object of type ", type_name(v), " is not JSON serializable");
}

template <class T>
int three_way(T a, T b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

}  // namespace

bool Value::is_namespace() const {
  return is_dict() && as_dict().is_namespace;
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictData::set(const Value& key, Value value) {
  for (auto& [k, v] : entries) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

Value make_list(std::vector<Value> items, bool is_tuple) {
  auto list = std::make_shared<ListData>();
  list->items = std::move(items);
  list->is_tuple = is_tuple;
  return Value(std::move(list));
}

Value make_dict() {
  return Value(std::make_shared<DictData>());
}

Value make_function(std::string name, std::function<Value(Interpreter&, CallArgs&)> call) {
  return Value(std::make_shared<const Function>(Function{std::move(name), std::move(call)}));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return v.is_namespace() ? "Namespace" : "dict";
    case Value::Kind::kFunction:
      return "function";
  }
  return "object";
}

std::string object_description(const Value& v) {
  return v.is_none() ? "None" : type_name(v) + " object";
}

void throw_undefined(const Value& v) {
  throw_error(v.undefined_message());
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return v.is_namespace() || !v.as_dict().entries.empty();
    case Value::Kind::kFunction:
      return true;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number() == b.number();
    return a.integral() == b.integral();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      if (a.is_namespace() || b.is_namespace()) return a.dict_ptr() == b.dict_ptr();
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, value] : x.entries) {
        const Value* other = y.find(key);
        if (!other || !equals(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction:
      return &a.as_function() == &b.as_function();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return three_way(a.number(), b.number());
    return three_way(a.integral(), b.integral());
  }
  if (a.is_string() && b.is_string())
    return a.as_string().compare(b.as_string()) < 0 ? -1 : (a.as_string() == b.as_string() ? 0 : 1);
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], op);
    }
    return three_way(x.size(), y.size());
  }
  throw_error("'", op, "' not supported between instances of '", type_name(a), "' and '",
              type_name(b), "'");
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string_view text(buf, static_cast<size_t>(result.ptr - buf));
  std::string out;
  if (text.front() == '-') {
    out.push_back('-');
    text.remove_prefix(1);
  }
  const size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e))
    if (c != '.') digits.push_back(c);
  int exponent = 0;
  std::from_chars(text.data() + e + 1 + (text[e + 1] == '+' ? 1 : 0), text.data() + text.size(),
                  exponent);
  // Python's repr switches to exponent notation outside 1e-4 <= |f| < 1e16.
  const int point = exponent + 1;  // digits are 0.d1d2... * 10^point
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out.append("0.").append(static_cast<size_t>(-point), '0').append(digits);
    } else if (static_cast<size_t>(point) >= digits.size()) {
      out.append(digits).append(static_cast<size_t>(point) - digits.size(), '0').append(".0");
    } else {
      const auto split = static_cast<size_t>(point);
      out.append(digits, 0, split).append(".").append(digits, split);
    }
  } else {
    out.append(digits, 0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    out += exponent < 0 ? "e-" : "e+";
    const int magnitude = std::abs(exponent);
    if (magnitude < 10) out.push_back('0');
    out += std::to_string(magnitude);
  }
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return format_float(v.as_float());
    case Value::Kind::kString:
      return v.as_string();
    case Value::Kind::kFunction:
      return "<function " + v.as_function().name + ">";
    default:
      return repr_at(v, 0);
  }
}

std::string repr(const Value& v) {
  return repr_at(v, 0);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list().items;
    case Value::Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<Value> keys;
      keys.reserve(v.as_dict().entries.size());
      for (const auto& entry : v.as_dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : py::decode(v.as_string())) {
        std::string one;
        py::append_utf8(one, c);
        chars.emplace_back(std::move(one));
      }
      return chars;
    }
    default:
      break;
  }
  throw_error("'", type_name(v), "' object is not iterable");
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(py::length(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::kDict:
      if (!v.is_namespace()) return static_cast<int64_t>(v.as_dict().entries.size());
      break;
    default:
      break;
  }
  throw_error("object of type '", type_name(v), "' has no len()");
}

namespace {

Value from_json_at(const nlohmann::ordered_json& json, int depth) {
  check_nesting(depth);
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json_at(item, depth + 1));
      return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value dict = make_dict();
      auto& entries = dict.as_dict().entries;
      entries.reserve(json.size());
      for (const auto& [key, item] : json.items())
        entries.emplace_back(Value(key), from_json_at(item, depth + 1));
      return dict;
    }
    default:
      throw_error("unsupported JSON value (binary data)");
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& json) {
  return from_json_at(json, 0);
}

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  json_dump(out, v, options, 0);
  return out;
}

}  // namespace dllm::jinja
