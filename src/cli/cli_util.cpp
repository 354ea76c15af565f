#include "cli/cli_util.h"

#include <limits>

#include "core/error.h"

namespace dllm::cli {

std::vector<int32_t> parse_int_list(const std::string& text, const std::string& option) {
  std::vector<int32_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) fail(option, ": empty item in '", text, "'");
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size()) fail(option, ": '", item, "' is not an integer");
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
      fail(option, ": ", item, " is out of range");
    out.push_back(static_cast<int32_t>(v));
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> parse_string_list(const std::string& text, const std::string& option) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) fail(option, ": empty item in '", text, "'");
    out.push_back(item);
    start = comma + 1;
  }
  return out;
}

}  // namespace dllm::cli
