// dllm generate --requests FILE.jsonl: every line one request through one engine, results in
// input order, a bad line failing alone, a summary on stderr.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_paths.h"

namespace dllm {
namespace {

TEST(GenerateRequestsFile, RunsEveryLineAndKeepsTheOrder) {
  const auto dir = test::temp_dir("requests");
  {
    std::ofstream f(dir / "in.jsonl");
    f << R"({"messages": [{"role": "user", "content": "What is 123 + 456?"}], "max_tokens": 16, "custom_id": "a"})"
      << "\n"
      << R"({"prompt_ids": [4093, 411, 198], "strategy": "ar", "max_tokens": 5})" << "\n"
      << "\n"  // blank lines are skipped
      << R"({"messages": [{"role": "user", "content": "What is 123 + 456?"}], "max_tokens": 16, "threshold": 2})"
      << "\n"
      << "not json\n"
      << R"({"messages": [{"role": "user", "content": "What is 602 + 416?"}], "max_tokens": 16, "strategy": "s2d2", "verify_policy": "score"})"
      << "\n";
  }
  // stdout and stderr together: result lines are JSON objects, the summary starts "[engine]".
  const auto r = test::run_command(test::dllm_binary() + " generate --device cpu --requests '" +
                                   (dir / "in.jsonl").string() + "' --concurrency 2");
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<nlohmann::json> lines;
  std::string summary;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[engine]", 0) == 0) summary = line;
    if (line.rfind("{", 0) == 0) lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 5u) << r.output;
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["index"], i);
  EXPECT_EQ(lines[0]["custom_id"], "a");
  EXPECT_EQ(lines[0]["text"], "579");
  EXPECT_EQ(lines[0]["finish_reason"], "stop");
  EXPECT_EQ(lines[1]["strategy"], "ar");
  EXPECT_EQ(lines[1]["ids"].size(), 5u);
  EXPECT_EQ(lines[2]["finish_reason"], "error");
  EXPECT_NE(lines[2]["error"].get<std::string>().find("--threshold must be in [0, 1]"),
            std::string::npos);
  EXPECT_EQ(lines[3]["finish_reason"], "error");
  EXPECT_NE(lines[3]["error"].get<std::string>().find("line 5"), std::string::npos);
  EXPECT_EQ(lines[4]["strategy"], "s2d2");
  EXPECT_EQ(lines[4]["text"], "1018");
  EXPECT_NE(summary.find("[engine] 5 requests (3 finished, 2 errors)"), std::string::npos)
      << summary;
}

}  // namespace
}  // namespace dllm
