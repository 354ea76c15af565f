// The JSONL request reader of `dllm generate --requests`: numbers are whole and in range or
// refused by name, never cut or wrapped; a seed reads as the server reads it.
#include "cli/request_json.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dllm::cli {
namespace {

std::string error_of(const std::string& line) {
  try {
    request_from_json(nlohmann::json::parse(line));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RequestJson, WholeNumbersInRangeOrANamedError) {
  EXPECT_EQ(request_from_json(nlohmann::json::parse(R"({"max_tokens": 7})")).max_tokens, 7);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"max_tokens": 2.5})", "\"max_tokens\" must be a whole number"},
      {R"({"max_tokens": 4294967297})", "\"max_tokens\" must be a whole number in [-2147483648"},
      {R"({"top_k": "3"})", "\"top_k\" must be a whole number"},
      {R"({"prompt_ids": [1, 4294967297]})", "\"prompt_ids\" must be a whole number"},
      {R"({"prompt_ids": [1.0]})", "\"prompt_ids\" must be a whole number"},
      {R"({"prompt_ids": 5})", "\"prompt_ids\" must be a list"},
      {R"({"stop_token_ids": [-1e3]})", "\"stop_token_ids\" must be a whole number"},
      {R"({"seed": 0.5})", "\"seed\" must be a whole number"},
      {R"({"seed": 18446744073709551616})", "\"seed\" must be a whole number"},
  };
  for (const auto& [line, needle] : refused) {
    EXPECT_NE(error_of(line).find(needle), std::string::npos) << line << ": " << error_of(line);
  }
}

TEST(RequestJson, SeedTakesTheWhole64BitRange) {
  auto seed = [](const char* line) { return *request_from_json(nlohmann::json::parse(line)).seed; };
  EXPECT_EQ(seed(R"({"seed": 18446744073709551615})"), UINT64_MAX);
  EXPECT_EQ(seed(R"({"seed": -1})"), UINT64_MAX);  // two's complement, as the server
  EXPECT_EQ(seed(R"({"seed": 42})"), 42u);
}

}  // namespace
}  // namespace dllm::cli
