// The dllm binary under hostile files (issue 19): every case ends promptly with exit status 1 and
// an error naming the file, never a crash, a hang or an "internal error".
#include <gtest/gtest.h>

#include "hostile/hostile_test_util.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using hostile::contains;
namespace fs = std::filesystem;

// A copy of the embedded tiny-block model (files linked, not copied) we can add files to.
fs::path linked_model(const std::string& tag) {
  const fs::path dir = test::temp_dir(tag);
  const fs::path source = test::models_dir() / "tiny-block";
  for (const auto& entry : fs::directory_iterator(source))
    fs::create_symlink(entry.path(), dir / entry.path().filename());
  return dir;
}

test::CommandResult dllm(const std::string& args) {
  // `timeout` turns a hang into a failure instead of a stuck test.
  return test::run_command("timeout 120 " + test::dllm_binary() + " " + args);
}

TEST(HostileCli, BrokenChatTemplateDoesNotBlockPromptIds) {
  const fs::path dir = linked_model("broken-template");
  hostile::write_text(dir / "chat_template.jinja", "{% for m in messages %}{{ m.content }");
  const auto plain = dllm("generate -m " + dir.string() + " --prompt-ids 1,2,3 --max-tokens 4");
  EXPECT_EQ(plain.status, 0) << plain.output;
  const auto chat = dllm("generate -m " + dir.string() + " --chat -p hi --max-tokens 4");
  EXPECT_EQ(chat.status, 1) << chat.output;
  EXPECT_TRUE(contains(chat.output, "chat_template.jinja line 1")) << chat.output;
  EXPECT_FALSE(contains(chat.output, "internal error")) << chat.output;
  fs::remove_all(dir);
}

TEST(HostileCli, DeeplyNestedMessagesFile) {
  const fs::path dir = test::temp_dir("deep-messages");
  hostile::write_text(dir / "m.json", "[{\"role\": \"user\", \"content\": \"x\", \"meta\": " +
                                          std::string(1000000, '[') + "}]");
  const auto r = dllm("chat-template --builtin wedlm --messages " + (dir / "m.json").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "m.json: JSON nested deeper than 64 levels at line 1"))
      << r.output;
  fs::remove_all(dir);
}

TEST(HostileCli, FifoMessagesFileAndTemplateDoNotBlock) {
  const fs::path dir = linked_model("fifo-template");
  hostile::make_fifo(dir / "m.json");
  const auto r = dllm("chat-template --builtin wedlm --messages " + (dir / "m.json").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "not a regular file (it is a FIFO)")) << r.output;
  hostile::make_fifo(dir / "chat_template.jinja");
  const auto g = dllm("generate -m " + dir.string() + " --chat -p hi --max-tokens 4");
  EXPECT_EQ(g.status, 1) << g.output;
  EXPECT_TRUE(contains(g.output, "chat_template.jinja: not a regular file")) << g.output;
  fs::remove_all(dir);
}

TEST(HostileCli, RunawayTemplateStopsAtALimit) {
  const fs::path dir = linked_model("runaway-template");
  hostile::write_text(dir / "chat_template.jinja",
                      "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}");
  hostile::write_text(dir / "m.json", R"([{"role": "user", "content": "hi"}])");
  const auto r = dllm("chat-template --tokenizer " + dir.string() + " --messages " +
                      (dir / "m.json").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "template limit max_string_bytes")) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dllm
