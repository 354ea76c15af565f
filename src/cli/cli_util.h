// Small parsing helpers shared by the subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dllm::cli {

// "5,17,42" -> {5, 17, 42}; errors name the option and the bad item.
std::vector<int32_t> parse_int_list(const std::string& text, const std::string& option);
// "a, b,c" -> {"a", "b", "c"}; an empty item is an error naming the option.
std::vector<std::string> parse_string_list(const std::string& text, const std::string& option);

}  // namespace dllm::cli
