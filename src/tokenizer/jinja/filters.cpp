// Filters (`value | name(args)`), each with jinja2's signature and Python semantics.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/limits.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/py_string.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

namespace {

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value get_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value current = item;
  for (const std::string& part : py::split(attribute.as_string(), std::string("."), -1)) {
    // Digits index a list; too many digits to be an index cannot name one (std::stoll would
    // throw std::out_of_range on them), so they stay a key.
    const bool numeric =
        !part.empty() && part.size() <= 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    current =
        get_item(current, numeric ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
  }
  return current;
}

// Sort/unique key: the item or its attribute, lower-cased when comparing strings case-blind.
Value sort_key(const Value& item, const BoundArgs& a, size_t case_sensitive_slot,
               size_t attribute_slot) {
  Value key = a.has(attribute_slot) && !a[attribute_slot].is_none()
                  ? get_path(item, a[attribute_slot])
                  : item;
  if (key.is_string() && !a.bool_or(case_sensitive_slot, false))
    key = Value(py::lower(key.as_string()));
  return key;
}

void stable_sort_values(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? compare(keys[y], keys[x], "<") < 0 : compare(keys[x], keys[y], "<") < 0;
  });
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

// Python int(text, base): surrounding whitespace, a sign, a base prefix (0x/0o/0b, which base 0
// detects) and single underscores between digits are allowed.
std::optional<int64_t> parse_python_int(std::string_view text, int base) {
  std::string digits = py::strip(text, std::nullopt, true, true);
  bool negative = false;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
    negative = digits[0] == '-';
    digits.erase(0, 1);
  }
  if (digits.size() > 2 && digits[0] == '0') {
    const char prefix = static_cast<char>(digits[1] | 0x20);
    const int prefix_base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : prefix == 'b' ? 2 : 0;
    if (prefix_base && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      digits.erase(0, 2);
      if (digits[0] == '_') digits.erase(0, 1);
    }
  }
  if (base == 0) base = 10;
  if (base < 2 || base > 36) throw_error("int() base must be >= 2 and <= 36, or 0");
  std::string clean;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (digits[i] == '_') {
      if (i == 0 || i + 1 == digits.size() || digits[i + 1] == '_') return std::nullopt;
      continue;
    }
    clean.push_back(digits[i]);
  }
  int64_t value = 0;
  const auto result = std::from_chars(clean.data(), clean.data() + clean.size(), value, base);
  if (clean.empty() || result.ec != std::errc() || result.ptr != clean.data() + clean.size())
    return std::nullopt;
  return negative ? -value : value;
}

std::optional<double> parse_python_float(std::string_view text) {
  const std::string stripped = py::strip(text, std::nullopt, true, true);
  std::string trimmed;  // Python allows single underscores between digits only
  for (size_t i = 0; i < stripped.size(); ++i) {
    if (stripped[i] != '_') {
      trimmed.push_back(stripped[i]);
    } else if (i == 0 || i + 1 == stripped.size() ||
               !std::isdigit(static_cast<unsigned char>(stripped[i - 1])) ||
               !std::isdigit(static_cast<unsigned char>(stripped[i + 1]))) {
      return std::nullopt;
    }
  }
  if (trimmed.empty() || trimmed.find_first_of("xX") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(trimmed.c_str(), &end);
  if (end != trimmed.c_str() + trimmed.size()) return std::nullopt;
  return value;
}

// ---- the filters ----

Value f_abs(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("abs", args, {});
  if (in.is_undefined()) throw_undefined(in);
  if (in.is_float()) return Value(std::fabs(in.as_float()));
  if (in.is_integral()) return in.integral() < 0 ? negate(in) : Value(in.integral());
  throw_error("bad operand type for abs(): '", type_name(in), "'");
}

Value f_capitalize(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("capitalize", args, {});
  return Value(py::capitalize(to_str(in)));
}

Value f_default(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("default", args, {"default_value", "boolean"});
  if (in.is_undefined() || (a.bool_or(1, false) && !truthy(in))) return a.get_or(0, Value(""));
  return in;
}

Value f_dictsort(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!in.is_mapping()) throw_error("You can only sort by either a mapping");
  const std::string by = a.string_opt(1).value_or("key");
  if (by != "key" && by != "value") throw_error("You can only sort by either 'key' or 'value'");
  std::vector<Value> items, keys;
  for (const auto& [key, value] : in.as_dict().entries) {
    items.push_back(make_list({key, value}, true));
    Value k = by == "key" ? key : value;
    if (k.is_string() && !a.bool_or(0, false)) k = Value(py::lower(k.as_string()));
    keys.push_back(k);
  }
  stable_sort_values(items, keys, a.bool_or(2, false));
  return make_list(std::move(items));
}

Value f_first(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("first", args, {});
  std::vector<Value> items = iterate(in);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("last", args, {});
  std::vector<Value> items = iterate(in);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_float(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("float", args, {"default"});
  if (in.is_undefined()) throw_undefined(in);
  if (in.is_number()) return Value(in.number());
  if (in.is_string())
    if (auto value = parse_python_float(in.as_string())) return Value(*value);
  return a.get_or(0, Value(0.0));
}

Value f_int(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("int", args, {"default", "base"});
  if (in.is_undefined()) throw_undefined(in);
  if (in.is_integral()) return Value(in.integral());
  if (in.is_float() && std::isfinite(in.as_float()) && std::fabs(in.as_float()) < 9.2e18)
    return Value(static_cast<int64_t>(in.as_float()));
  if (in.is_string()) {
    if (auto value = parse_python_int(in.as_string(), static_cast<int>(a.int_or(1, 10))))
      return Value(*value);
    if (auto value = parse_python_float(in.as_string()))
      if (std::isfinite(*value) && std::fabs(*value) < 9.2e18)
        return Value(static_cast<int64_t>(*value));
  }
  return a.get_or(0, Value(0));
}

Value f_indent(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("indent", args, {"width", "first", "blank"});
  std::string indentation = "    ";
  if (a.has(0) && !a[0].is_string())
    check_string_bytes(static_cast<uint64_t>(std::max<int64_t>(0, a.int_or(0, 4))),
                       "an indent() width");
  if (a.has(0))
    indentation = a[0].is_string()
                      ? a[0].as_string()
                      : std::string(static_cast<size_t>(std::max<int64_t>(0, a.int_or(0, 4))), ' ');
  if (in.is_undefined()) throw_undefined(in);
  if (!in.is_string()) throw_error("indent() needs a string, not ", type_name(in));
  // jinja2 appends a newline so that splitlines keeps a trailing empty line.
  const std::string text = in.as_string() + "\n";
  const std::vector<std::string> lines = py::splitlines(text, false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    const bool indent_line = i > 0 && (a.bool_or(2, false) || !lines[i].empty());
    check_string_bytes(uint64_t{out.size()} + indentation.size() + lines[i].size(),
                       "the result of indent()");
    if (indent_line) out += indentation;
    out += lines[i];
  }
  if (a.bool_or(1, false)) out = indentation + out;
  return Value(std::move(out));
}

Value f_items(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("items", args, {});
  if (in.is_undefined()) return make_list();
  if (!in.is_mapping()) throw_error("Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [key, value] : in.as_dict().entries)
    items.push_back(make_list({key, value}, true));
  return make_list(std::move(items));
}

Value f_join(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("join", args, {"d", "attribute"});
  const std::string separator = a.has(0) ? to_str(a[0]) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(in)) {
    const std::string text = to_str(a.has(1) && !a[1].is_none() ? get_path(item, a[1]) : item);
    check_string_bytes(uint64_t{out.size()} + separator.size() + text.size(),
                       "the result of join()");
    if (!first) out += separator;
    first = false;
    out += text;
  }
  return Value(std::move(out));
}

Value f_length(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("length", args, {});
  return Value(length(in));
}

Value f_list(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("list", args, {});
  return make_list(iterate(in));
}

Value f_lower(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("lower", args, {});
  return Value(py::lower(to_str(in)));
}

Value f_upper(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("upper", args, {});
  return Value(py::upper(to_str(in)));
}

Value f_map(Interpreter& interpreter, const Value& in, CallArgs& args) {
  std::vector<Value> out;
  if (args.positional.empty()) {
    BoundArgs a("map", args, {"attribute", "default"}, 1);
    for (const Value& item : iterate(in)) {
      Value value = get_path(item, a[0]);
      out.push_back(value.is_undefined() && a.has(1) ? a[1] : value);
    }
    return make_list(std::move(out));
  }
  if (!args.positional[0].is_string()) throw_error("map() needs a filter name or attribute=");
  const std::string filter = args.positional[0].as_string();
  for (const Value& item : iterate(in)) {
    CallArgs filter_args{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
    out.push_back(interpreter.apply_filter(filter, item, filter_args));
  }
  return make_list(std::move(out));
}

Value min_or_max(const Value& in, CallArgs& args, bool want_max) {
  BoundArgs a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  std::vector<Value> items = iterate(in);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], a, 0, 1);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(items[i], a, 0, 1);
    const int order = compare(key, best_key, want_max ? ">" : "<");
    if (want_max ? order > 0 : order < 0) best = i, best_key = key;
  }
  return items[best];
}

Value f_max(Interpreter&, const Value& in, CallArgs& args) {
  return min_or_max(in, args, true);
}
Value f_min(Interpreter&, const Value& in, CallArgs& args) {
  return min_or_max(in, args, false);
}

// select / reject / selectattr / rejectattr: the test is named by the first extra argument;
// without one the item's truthiness decides.
Value select_items(Interpreter& interpreter, const Value& in, CallArgs& args, bool by_attribute,
                   bool keep_when) {
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw_error("selectattr/rejectattr need an attribute name");
    attribute = args.positional[next++];
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) throw_error("the test name must be a string");
    test = args.positional[next++].as_string();
  }
  std::vector<Value> out;
  for (const Value& item : iterate(in)) {
    const Value subject = by_attribute ? get_path(item, attribute) : item;
    bool passed = false;
    if (test) {
      CallArgs test_args{
          {args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end()},
          args.keyword};
      passed = interpreter.apply_test(*test, subject, test_args);
    } else {
      passed = truthy(subject);
    }
    if (passed == keep_when) out.push_back(item);
  }
  return make_list(std::move(out));
}

Value f_select(Interpreter& i, const Value& in, CallArgs& args) {
  return select_items(i, in, args, false, true);
}
Value f_reject(Interpreter& i, const Value& in, CallArgs& args) {
  return select_items(i, in, args, false, false);
}
Value f_selectattr(Interpreter& i, const Value& in, CallArgs& args) {
  return select_items(i, in, args, true, true);
}
Value f_rejectattr(Interpreter& i, const Value& in, CallArgs& args) {
  return select_items(i, in, args, true, false);
}

Value f_replace(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("replace", args, {"old", "new", "count"}, 2);
  return Value(py::replace(to_str(in), to_str(a[0]), to_str(a[1]), a.int_or(2, -1)));
}

Value f_reverse(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("reverse", args, {});
  if (in.is_string()) {
    std::u32string cps = py::decode(in.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(py::encode(cps));
  }
  std::vector<Value> items = iterate(in);
  std::reverse(items.begin(), items.end());
  return make_list(std::move(items));
}

Value f_round(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("round", args, {"precision", "method"});
  const int64_t precision = a.int_or(0, 0);
  const std::string method = a.string_opt(1).value_or("common");
  if (method != "common" && method != "ceil" && method != "floor")
    throw_error("method must be common, ceil or floor");
  if (in.is_undefined()) throw_undefined(in);
  if (!in.is_number()) throw_error("round() needs a number, not ", type_name(in));
  if (method == "common" && in.is_integral() && precision >= 0) return Value(in.integral());
  const double value = in.number();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "ceil") return Value(std::ceil(value * scale) / scale);
  if (method == "floor") return Value(std::floor(value * scale) / scale);
  if (!std::isfinite(value)) return Value(value);
  if (precision <= 0) return Value(std::nearbyint(value / (1 / scale)) * (1 / scale));
  // Python rounds the exact binary value to `precision` decimals, half to even.
  char buffer[512];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed,
                                    static_cast<int>(std::min<int64_t>(precision, 300)));
  return Value(std::strtod(std::string(buffer, result.ptr).c_str(), nullptr));
}

Value f_safe(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("safe", args, {});
  return Value(to_str(in));
}

Value f_sort(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("sort", args, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> items = iterate(in);
  std::vector<Value> keys;
  for (const Value& item : items) keys.push_back(sort_key(item, a, 1, 2));
  stable_sort_values(items, keys, a.bool_or(0, false));
  return make_list(std::move(items));
}

Value f_string(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("string", args, {});
  return Value(to_str(in));
}

Value f_sum(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("sum", args, {"attribute", "start"});
  Value total = a.get_or(1, Value(0));
  for (const Value& item : iterate(in))
    total = binary_operation(BinaryExpr::Op::kAdd, total,
                             a.has(0) && !a[0].is_none() ? get_path(item, a[0]) : item);
  return total;
}

// jinja2's title filter: upper-case the first letter after - ( { [ < or whitespace.
Value f_title(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("title", args, {});
  std::string out;
  bool word_start = true;
  for (char32_t c : py::decode(to_str(in))) {
    const bool separator =
        c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::is_space(c);
    std::string one;
    py::append_utf8(one, c);
    out += separator ? one : (word_start ? py::upper(one) : py::lower(one));
    word_start = separator;
  }
  return Value(std::move(out));
}

// Hugging Face replaces jinja2's tojson with json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False): no HTML escaping, keys in insertion order.
Value f_tojson(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = a.bool_or(0, false);
  if (a.has(1) && !a[1].is_none()) {
    if (!a[1].is_string())
      check_string_bytes(static_cast<uint64_t>(std::max<int64_t>(0, a.int_or(1, 0))),
                         "a tojson() indent");
    options.indent =
        a[1].is_string()
            ? a[1].as_string()
            : std::string(static_cast<size_t>(std::max<int64_t>(0, a.int_or(1, 0))), ' ');
  }
  if (a.has(2) && !a[2].is_none()) {
    const std::vector<Value> parts = iterate(a[2]);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      throw_error("tojson(): separators must be a pair of strings");
    options.separators = std::make_pair(parts[0].as_string(), parts[1].as_string());
  }
  options.sort_keys = a.bool_or(3, false);
  return Value(json_dumps(in, options));
}

Value f_trim(Interpreter&, const Value& in, CallArgs& args) {
  BoundArgs a("trim", args, {"chars"});
  return Value(py::strip(to_str(in), a.string_opt(0), true, true));
}

Value f_unique(Interpreter& interpreter, const Value& in, CallArgs& args) {
  BoundArgs a("unique", args, {"case_sensitive", "attribute"});
  std::vector<Value> out, seen;
  for (const Value& item : iterate(in)) {
    interpreter.charge_steps(static_cast<int64_t>(seen.size()) + 1);  // the scan below
    Value key = sort_key(item, a, 0, 1);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); }))
      continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return make_list(std::move(out));
}

constexpr FilterDef kFilters[] = {
    {"abs", f_abs},
    {"capitalize", f_capitalize},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"first", f_first},
    {"float", f_float},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
};

}  // namespace

const FilterDef* find_filter(std::string_view name) {
  for (const FilterDef& filter : kFilters)
    if (filter.name == name) return &filter;
  return nullptr;
}

}  // namespace dllm::jinja
