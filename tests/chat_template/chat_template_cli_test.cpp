// `dllm chat-template`: byte-exact output against the transformers goldens, and one-line errors
// with a non-zero exit for bad input.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cstdio>
#include <fstream>

#include "chat_template/test_support.h"
#include "io/json_file.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using nlohmann::ordered_json;
using testing::ScratchDir;
using testing::write_file;

struct CliResult {
  int exit_code;
  std::string out;
  std::string err;
};

CliResult run_cli(const std::string& args, const ScratchDir& dir) {
  const std::string err_path = (dir.path() / "stderr.txt").string();
  const std::string command =
      test::dllm_binary() + " chat-template " + args + " 2>'" + err_path + "'";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return {-1, "", "popen failed"};
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, read_text_file(err_path)};
}

ordered_json golden_case(const std::string& template_id, const std::string& name) {
  std::ifstream in(testing::chat_fixtures_dir() / "chat_cases.json");
  const ordered_json root = ordered_json::parse(in);
  for (const auto& c : root["cases"])
    if (c["template"] == template_id && c["name"] == name) return c;
  ADD_FAILURE() << "no golden case " << template_id << "/" << name;
  return ordered_json::object();
}

std::string quoted(const std::filesystem::path& path) {
  std::string text = "'";
  return text.append(path.string()).append("'");
}

const std::string kQwen3Dir = quoted(testing::chat_fixtures_dir() / "qwen3");

TEST(ChatTemplateCli, MessagesListWithThinkingFlag) {
  ScratchDir dir;
  const ordered_json c = golden_case("qwen3", "multi_turn_think_history_thinking_false");
  const auto messages = write_file(dir.path() / "messages.json", c["messages"].dump());
  const CliResult r = run_cli(
      "--tokenizer " + kQwen3Dir + " --messages '" + messages + "' --enable-thinking false", dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, c["expected"].get<std::string>());
}

TEST(ChatTemplateCli, ObjectWithToolsAndTokenizerJsonPath) {
  ScratchDir dir;
  const ordered_json c = golden_case("qwen3", "tools_with_calls");
  ordered_json input = c["extra_vars"];
  input["messages"] = c["messages"];
  const auto messages = write_file(dir.path() / "messages.json", input.dump(2));
  const auto tokenizer_json =
      quoted(testing::chat_fixtures_dir() / "qwen3" / "tokenizer_config.json");
  const CliResult r =
      run_cli("--tokenizer " + tokenizer_json + " --messages '" + messages + "'", dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, c["expected"].get<std::string>());
}

TEST(ChatTemplateCli, NoGenerationPrompt) {
  ScratchDir dir;
  const ordered_json c = golden_case("qwen3", "final_assistant_keeps_think");
  const auto messages = write_file(dir.path() / "messages.json", c["messages"].dump());
  const CliResult r = run_cli(
      "--tokenizer " + kQwen3Dir + " --messages '" + messages + "' --no-generation-prompt", dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, c["expected"].get<std::string>());
}

TEST(ChatTemplateCli, BuiltinWithoutTokenizer) {
  ScratchDir dir;
  const auto messages =
      write_file(dir.path() / "m.json", R"([{"role": "user", "content": "Hello"}])");
  const CliResult r = run_cli("--builtin llada2_moe --messages '" + messages + "'", dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "<role>SYSTEM</role>detailed thinking "
            "off<|role_end|><role>HUMAN</role>Hello<|role_end|><role>ASSISTANT</role>");
}

// Each failure: exit status 1 and one line on stderr naming the offending file.
void expect_one_line_error(const CliResult& r, const std::string& must_contain) {
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find(must_contain), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(ChatTemplateCli, MalformedMessagesFile) {
  ScratchDir dir;
  const auto messages = write_file(dir.path() / "bad.json", R"([{"role": "user", "content": "x"})");
  expect_one_line_error(run_cli("--tokenizer " + kQwen3Dir + " --messages '" + messages + "'", dir),
                        "messages file " + messages + ": invalid JSON");
  const auto not_a_list = write_file(dir.path() / "obj.json", R"({"role": "user"})");
  expect_one_line_error(
      run_cli("--tokenizer " + kQwen3Dir + " --messages '" + not_a_list + "'", dir),
      "messages file " + not_a_list + ": expected a JSON list");
}

TEST(ChatTemplateCli, CheckpointWithoutTemplate) {
  ScratchDir dir;
  write_file(dir.path() / "ckpt" / "tokenizer_config.json", R"({"eos_token": "</s>"})");
  const auto messages = write_file(dir.path() / "m.json", R"([{"role": "user", "content": "x"}])");
  expect_one_line_error(
      run_cli("--tokenizer " + quoted(dir.path() / "ckpt") + " --messages '" + messages + "'", dir),
      (dir.path() / "ckpt").string() + ": no chat template");
}

TEST(ChatTemplateCli, TemplateErrorNamesFileAndLine) {
  ScratchDir dir;
  write_file(dir.path() / "ckpt" / "chat_template.jinja",
             "{% for m in messages %}\n{% include 'x' %}\n{% endfor %}");
  const auto messages = write_file(dir.path() / "m.json", R"([{"role": "user", "content": "x"}])");
  expect_one_line_error(
      run_cli("--tokenizer " + quoted(dir.path() / "ckpt") + " --messages '" + messages + "'", dir),
      "chat_template.jinja line 2: unsupported tag 'include'");
}

TEST(ChatTemplateCli, BadFlagValues) {
  ScratchDir dir;
  const auto messages = write_file(dir.path() / "m.json", R"([{"role": "user", "content": "x"}])");
  expect_one_line_error(
      run_cli("--tokenizer " + kQwen3Dir + " --messages '" + messages + "' --enable-thinking maybe",
              dir),
      "--enable-thinking must be true or false");
  expect_one_line_error(run_cli("--builtin nope --messages '" + messages + "'", dir),
                        "no built-in chat template");
  expect_one_line_error(run_cli("--messages '" + messages + "'", dir),
                        "--tokenizer PATH or --builtin FAMILY");
}

}  // namespace
}  // namespace dllm
