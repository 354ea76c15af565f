// Typed reads of request-body fields. Absent or null is "not given" (nullopt), as OpenAI's API
// treats null; a present value of the wrong type or out of range is a 400 naming the field, the
// value and the accepted range.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dllm::server {

using Json = nlohmann::ordered_json;

// The field's value, nullptr when absent or null.
const Json* field(const Json& body, const std::string& key);

std::optional<int64_t> int_field(const Json& body, const std::string& key, int64_t lo, int64_t hi);
std::optional<double> number_field(const Json& body, const std::string& key, double lo, double hi);
std::optional<bool> bool_field(const Json& body, const std::string& key);
std::optional<std::string> string_field(const Json& body, const std::string& key);
// A string or a list of strings (OpenAI's `stop`), at most `max_items`, none empty.
std::vector<std::string> strings_field(const Json& body, const std::string& key, size_t max_items);
// A list of integers in [lo, hi], at most `max_items`.
std::vector<int32_t> ints_field(const Json& body, const std::string& key, int64_t lo, int64_t hi,
                                size_t max_items);

// "string", "number", ... for messages.
std::string json_type(const Json& v);
// A short rendering of a value for error messages (cut at 40 characters).
std::string json_excerpt(const Json& v);

}  // namespace dllm::server
