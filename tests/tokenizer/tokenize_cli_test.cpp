// dllm tokenize / detokenize, run as a user would, against the Hugging Face goldens.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <array>
#include <cstdio>

#include "tokenizer_test_util.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

struct RunResult {
  int status;
  std::string output;  // stdout and stderr
};

RunResult run(const std::string& args) {
  const std::string command = test::dllm_binary() + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string join(const std::vector<int32_t>& ids, char sep) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += sep;
    s += std::to_string(id);
  }
  return s;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

const nlohmann::json& golden_case(const std::string& name) {
  for (const auto& c : testing::qwen3_goldens()["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no golden case " + name);
}

TEST(TokenizeCli, FileTextAndDetokenize) {
  const std::string dir = (testing::tokenizer_fixtures() / "qwen3").string();
  const std::string json_path =
      (testing::tokenizer_fixtures() / "qwen3" / "tokenizer.json").string();
  const auto& c = golden_case("special_tokens.txt");
  const auto ids = c["ids"].get<std::vector<int32_t>>();

  RunResult r = run("tokenize --tokenizer " + dir + " --file " +
                    (testing::tokenizer_fixtures() / "corpus" / "special_tokens.txt").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, join(ids, ' ') + "\n");

  const auto& line = golden_case("contractions.txt:1");
  r = run("tokenize --tokenizer " + json_path + " --text " + shell_quote(line["text"]));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, join(line["ids"].get<std::vector<int32_t>>(), ' ') + "\n");

  r = run("detokenize --tokenizer " + dir + " --ids " + join(ids, ','));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, c["decoded"].get<std::string>() + "\n");
  r = run("detokenize --tokenizer " + dir + " --skip-special-tokens --ids " + join(ids, ','));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, c["decoded_skip_special"].get<std::string>() + "\n");
}

TEST(TokenizeCli, ErrorsAreOneLine) {
  const std::string dir = (testing::tokenizer_fixtures() / "qwen3").string();
  for (const std::string& args : {std::string("tokenize --tokenizer /no/such/dir --text hi"),
                                  "tokenize --tokenizer " + dir + " --file /no/such/file.txt",
                                  "detokenize --tokenizer " + dir + " --ids 1,x,3",
                                  "detokenize --tokenizer " + dir + " --ids 1,999999999"}) {
    const RunResult r = run(args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("dllm: error: ", 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

}  // namespace
}  // namespace dllm
