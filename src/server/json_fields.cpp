#include "server/json_fields.h"

#include <cmath>

#include "core/error.h"
#include "server/api_error.h"

namespace dllm::server {

const Json* field(const Json& body, const std::string& key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string json_type(const Json& v) {
  if (v.is_number_integer()) return "integer";
  return v.type_name();
}

std::string json_excerpt(const Json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

namespace {

std::optional<int64_t> integer_value(const Json& v, const std::string& key, int64_t lo,
                                     int64_t hi) {
  if (!v.is_number_integer())
    bad_request(
        key, cat("'", key, "' must be an integer (got ", json_type(v), " ", json_excerpt(v), ")"));
  // Unsigned values past int64 range read as negative; range-check the true value.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    bad_request(key,
                cat("'", key, "' must be in [", lo, ", ", hi, "] (got ", json_excerpt(v), ")"));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad_request(key, cat("'", key, "' must be in [", lo, ", ", hi, "] (got ", x, ")"));
  return x;
}

}  // namespace

std::optional<int64_t> int_field(const Json& body, const std::string& key, int64_t lo, int64_t hi) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  return integer_value(*v, key, lo, hi);
}

std::optional<double> number_field(const Json& body, const std::string& key, double lo, double hi) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number())
    bad_request(
        key, cat("'", key, "' must be a number (got ", json_type(*v), " ", json_excerpt(*v), ")"));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad_request(key, cat("'", key, "' must be in [", lo, ", ", hi, "] (got ", x, ")"));
  return x;
}

std::optional<bool> bool_field(const Json& body, const std::string& key) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    bad_request(key, cat("'", key, "' must be true or false (got ", json_type(*v), " ",
                         json_excerpt(*v), ")"));
  return v->get<bool>();
}

std::optional<std::string> string_field(const Json& body, const std::string& key) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_string())
    bad_request(
        key, cat("'", key, "' must be a string (got ", json_type(*v), " ", json_excerpt(*v), ")"));
  return v->get<std::string>();
}

std::vector<std::string> strings_field(const Json& body, const std::string& key, size_t max_items) {
  const Json* v = field(body, key);
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > max_items)
      bad_request(
          key, cat("'", key, "' has ", v->size(), " items; at most ", max_items, " are accepted"));
    for (const Json& s : *v) {
      if (!s.is_string())
        bad_request(key, cat("'", key,
                             "' must be a string or a list of strings (got an item of "
                             "type ",
                             json_type(s), ")"));
      out.push_back(s.get<std::string>());
    }
  } else {
    bad_request(key,
                cat("'", key, "' must be a string or a list of strings (got ", json_type(*v), ")"));
  }
  for (const std::string& s : out)
    if (s.empty()) bad_request(key, cat("'", key, "' must not contain empty strings"));
  return out;
}

std::vector<int32_t> ints_field(const Json& body, const std::string& key, int64_t lo, int64_t hi,
                                size_t max_items) {
  const Json* v = field(body, key);
  if (!v) return {};
  if (!v->is_array())
    bad_request(key, cat("'", key, "' must be a list of integers (got ", json_type(*v), ")"));
  if (v->size() > max_items)
    bad_request(key,
                cat("'", key, "' has ", v->size(), " items; at most ", max_items, " are accepted"));
  std::vector<int32_t> out;
  for (const Json& x : *v) out.push_back(static_cast<int32_t>(*integer_value(x, key, lo, hi)));
  return out;
}

}  // namespace dllm::server
