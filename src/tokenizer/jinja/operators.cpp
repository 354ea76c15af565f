#include "tokenizer/jinja/operators.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

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

Value repeat(const Value& sequence, int64_t times) {
  if (times < 0) times = 0;
  if (sequence.is_string()) {
    const std::string& s = sequence.as_string();
    if (!s.empty() && static_cast<uint64_t>(times) > (uint64_t{1} << 30) / s.size())
      throw_error("repeated string too long");
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value(std::move(out));
  }
  const ListData& list = sequence.as_list();
  if (!list.items.empty() && static_cast<uint64_t>(times) > (uint64_t{1} << 24) / list.items.size())
    throw_error("repeated list too long");
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i)
    items.insert(items.end(), list.items.begin(), list.items.end());
  return make_list(std::move(items), list.is_tuple);
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
    std::string spec = "%" + flags + width + precision;
    char buffer[512];
    std::string piece;
    switch (conversion) {
      case 's':
      case 'r': {
        piece = conversion == 's' ? to_str(*value) : repr(*value);
        if (precision.size() > 1) piece = piece.substr(0, std::stoul(precision.substr(1)));
        const size_t w = width.empty() ? 0 : std::stoul(width);
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
        const auto n = static_cast<long long>(value->is_float() ? std::trunc(value->as_float())
                                                                : value->integral());
        spec += "ll";
        spec.push_back(conversion == 'i' ? 'd' : conversion);
        std::snprintf(buffer, sizeof buffer, spec.c_str(), n);
        piece = buffer;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
        if (!value->is_number()) throw_error("must be real number, not ", type_name(*value));
        spec.push_back(conversion);
        std::snprintf(buffer, sizeof buffer, spec.c_str(), value->number());
        piece = buffer;
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
