#include "tokenizer/jinja/operators.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tokenizer/jinja/limits.h"
#include "tokenizer/jinja/template_error.h"

namespace dllm::jinja {

namespace {

std::string_view symbol(BinaryExpr::Op op) {
  switch (op) {
    case BinaryExpr::Op::kAdd:
      return "+";
    case BinaryExpr::Op::kSub:
      return "-";
    case BinaryExpr::Op::kMul:
      return "*";
    case BinaryExpr::Op::kDiv:
      return "/";
    case BinaryExpr::Op::kFloorDiv:
      return "//";
    case BinaryExpr::Op::kMod:
      return "%";
    case BinaryExpr::Op::kPow:
      return "**";
    case BinaryExpr::Op::kConcat:
      return "~";
    case BinaryExpr::Op::kAnd:
      return "and";
    case BinaryExpr::Op::kOr:
      return "or";
  }
  return "?";
}

[[noreturn]] void unsupported_operands(BinaryExpr::Op op, const Value& a, const Value& b) {
  throw_error("unsupported operand type(s) for ", symbol(op), ": '", type_name(a), "' and '",
              type_name(b), "'");
}

int64_t add_checked(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) throw_error("integer overflow");
  return result;
}
int64_t sub_checked(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_sub_overflow(a, b, &result)) throw_error("integer overflow");
  return result;
}
int64_t mul_checked(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) throw_error("integer overflow");
  return result;
}

uint64_t times_n(uint64_t x, uint64_t n) {
  uint64_t product = 0;
  return __builtin_mul_overflow(x, n, &product) ? UINT64_MAX : product;
}

Value repeat(const Value& sequence, int64_t times) {
  if (times < 0) times = 0;
  const auto n = static_cast<uint64_t>(times);
  if (sequence.is_string()) {
    const std::string& s = sequence.as_string();
    // Saturating product: 'x' * 10**18 must be refused, not wrapped.
    check_string_bytes(times_n(s.size(), n), "a repeated string");
    std::string out;
    out.reserve(s.size() * n);
    for (uint64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const ListData& list = sequence.as_list();
  // Strings are values: repeating a list copies its strings `times` times.
  uint64_t string_bytes = 0;
  for (const Value& item : list.items)
    if (item.is_string()) string_bytes += item.as_string().size();
  check_list_items(times_n(list.items.size(), n), "a repeated list");
  check_string_bytes(times_n(string_bytes, n), "the strings of a repeated list");
  std::vector<Value> items;
  items.reserve(list.items.size() * n);
  for (uint64_t i = 0; i < n; ++i) items.insert(items.end(), list.items.begin(), list.items.end());
  return make_list(std::move(items), list.is_tuple);
}

// A printf width or precision as written ("%12s"): digits only, capped by the string limit
// (std::stoul would throw std::out_of_range on "%99999999999999999999s").
size_t format_number(const std::string& digits, std::string_view what) {
  uint64_t value = 0;
  for (char c : digits) {
    value = value * 10 + static_cast<uint64_t>(c - '0');
    if (value > kMaxStringBytes) check_string_bytes(value, what);
  }
  return static_cast<size_t>(value);
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1 && a == INT64_MIN) throw_error("integer overflow");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t int_pow(int64_t base, int64_t exponent) {
  int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = mul_checked(result, base);
    exponent >>= 1;
    if (exponent) base = mul_checked(base, base);
  }
  return result;
}

// snprintf into a string of the size it needs (widths were bounded by format_number).
template <class T>
std::string c_format(const std::string& spec, T value) {
  const int size = std::snprintf(nullptr, 0, spec.c_str(), value);
  if (size < 0) throw_error("invalid format '", spec, "'");
  std::string out(static_cast<size_t>(size) + 1, '\0');
  std::snprintf(out.data(), out.size(), spec.c_str(), value);
  out.resize(static_cast<size_t>(size));
  return out;
}

// Python's printf-style `format % args` for the conversions templates use: s r d i f F e E x X o
// and %%, with flags, width, precision and %(name)s keys.
std::string printf_format(const std::string& format, const Value& args) {
  const bool is_tuple = args.is_list() && args.as_list().is_tuple;
  const std::vector<Value> positional = is_tuple ? args.as_list().items : std::vector<Value>{args};
  // A list or dict argument (not a tuple) may be left unused, as in Python.
  const bool extra_allowed = args.is_mapping() || (args.is_list() && !is_tuple);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) throw_error("incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) throw_error("incomplete format key");
      if (!args.is_mapping()) throw_error("format requires a mapping");
      const std::string key = format.substr(i + 1, close - i - 1);
      value = args.as_dict().find(key);
      if (!value) throw_error("format key '", key, "' not found");
      i = close + 1;
    }
    std::string flags, width, precision;
    while (i < format.size() && std::string_view("-+ 0#").find(format[i]) != std::string_view::npos)
      flags.push_back(format[i++]);
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])))
      width.push_back(format[i++]);
    if (i < format.size() && format[i] == '.') {
      precision = ".";
      while (++i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])))
        precision.push_back(format[i]);
    }
    if (i >= format.size()) throw_error("incomplete format");
    const char conversion = format[i];
    if (conversion == '%') {
      out.push_back('%');
      continue;
    }
    if (!value) {
      if (next >= positional.size()) throw_error("not enough arguments for format string");
      value = &positional[next++];
    }
    if (value->is_undefined()) throw_undefined(*value);
    // Widths and precisions are bounded before any formatting allocates for them.
    if (!width.empty()) format_number(width, "a format width");
    if (precision.size() > 1) format_number(precision.substr(1), "a format precision");
    std::string spec = "%" + flags + width + precision;
    std::string piece;
    switch (conversion) {
      case 's':
      case 'r': {
        piece = conversion == 's' ? to_str(*value) : repr(*value);
        if (precision.size() > 1)
          piece = piece.substr(0, format_number(precision.substr(1), "a format precision"));
        const size_t w = width.empty() ? 0 : format_number(width, "a format width");
        const bool left = flags.find('-') != std::string::npos;
        if (piece.size() < w) piece.insert(left ? piece.size() : 0, w - piece.size(), ' ');
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!value->is_number())
          throw_error("%", conversion, " format: a real number is required, not ",
                      type_name(*value));
        // Converting a float outside long long's range is undefined behaviour in C++.
        if (value->is_float() && !(std::fabs(value->as_float()) < 9.2e18))
          throw_error("%", conversion, " format: cannot convert float ",
                      format_float(value->as_float()), " to an integer");
        const auto n = static_cast<long long>(value->is_float() ? std::trunc(value->as_float())
                                                                : value->integral());
        spec += "ll";
        spec.push_back(conversion == 'i' ? 'd' : conversion);
        piece = c_format(spec, n);
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
        if (!value->is_number()) throw_error("must be real number, not ", type_name(*value));
        spec.push_back(conversion);
        piece = c_format(spec, value->number());
        break;
      default:
        throw_error("unsupported format character '", conversion, "'");
    }
    out += piece;
  }
  if (next < positional.size() && !extra_allowed)
    throw_error("not all arguments converted during string formatting");
  return out;
}

}  // namespace

Value negate(const Value& v) {
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_float()) return Value(-v.as_float());
  if (v.is_integral()) return Value(sub_checked(0, v.integral()));
  throw_error("bad operand type for unary -: '", type_name(v), "'");
}

Value binary_operation(BinaryExpr::Op op, const Value& a, const Value& b) {
  using Op = BinaryExpr::Op;
  if (op == Op::kConcat) return Value(to_str(a) + to_str(b));
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool integers = a.is_integral() && b.is_integral();
  switch (op) {
    case Op::kAdd:
      if (integers) return Value(add_checked(a.integral(), b.integral()));
      if (numbers) return Value(a.number() + b.number());
      if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
        std::vector<Value> items = a.as_list().items;
        items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
        return make_list(std::move(items), a.as_list().is_tuple);
      }
      if (a.is_string())
        throw_error("can only concatenate str (not \"", type_name(b), "\") to str");
      break;
    case Op::kSub:
      if (integers) return Value(sub_checked(a.integral(), b.integral()));
      if (numbers) return Value(a.number() - b.number());
      break;
    case Op::kMul:
      if (integers) return Value(mul_checked(a.integral(), b.integral()));
      if (numbers) return Value(a.number() * b.number());
      if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.integral());
      if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(b, a.integral());
      break;
    case Op::kDiv:
      if (numbers) {
        if (b.number() == 0) throw_error("division by zero");
        return Value(a.number() / b.number());
      }
      break;
    case Op::kFloorDiv:
      if (integers) {
        if (b.integral() == 0) throw_error("integer division or modulo by zero");
        return Value(floor_div(a.integral(), b.integral()));
      }
      if (numbers) {
        if (b.number() == 0) throw_error("float floor division by zero");
        return Value(std::floor(a.number() / b.number()));
      }
      break;
    case Op::kMod:
      if (integers) {
        if (b.integral() == 0) throw_error("integer division or modulo by zero");
        if (b.integral() == -1) return Value(int64_t{0});
        const int64_t r = a.integral() % b.integral();
        return Value(r != 0 && ((r < 0) != (b.integral() < 0)) ? r + b.integral() : r);
      }
      if (numbers) {
        if (b.number() == 0) throw_error("float modulo by zero");
        double r = std::fmod(a.number(), b.number());
        if (r != 0 && ((r < 0) != (b.number() < 0))) r += b.number();
        return Value(r);
      }
      if (a.is_string()) return Value(printf_format(a.as_string(), b));
      break;
    case Op::kPow:
      if (integers && b.integral() >= 0) return Value(int_pow(a.integral(), b.integral()));
      if (numbers) {
        if (a.number() == 0 && b.number() < 0)
          throw_error("0.0 cannot be raised to a negative power");
        return Value(std::pow(a.number(), b.number()));
      }
      break;
    default:
      break;
  }
  unsupported_operands(op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        throw_error("'in <string>' requires string as left operand, not ", type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& element : container.as_list().items)
        if (equals(element, item)) return true;
      return false;
    case Value::Kind::kDict:
      if (container.is_namespace()) break;
      return container.as_dict().find(item) != nullptr;
    default:
      break;
  }
  throw_error("argument of type '", type_name(container), "' is not iterable");
}

}  // namespace dllm::jinja
