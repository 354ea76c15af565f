// Loading chat templates from checkpoint directories (with transformers' precedence rules), the
// built-in templates against the prompt strings in model-specs, and render() argument checks.
#include <gtest/gtest.h>

#include <functional>

#include "chat_template/test_support.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace dllm {
namespace {

using nlohmann::ordered_json;
using testing::ScratchDir;
using testing::write_file;

const ordered_json kHello = ordered_json::parse(R"([{"role": "user", "content": "Hello"}])");

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChatTemplateLoad, FromDirectoryOrAnyFileInIt) {
  ScratchDir dir;
  write_file(
      dir.path() / "tokenizer_config.json",
      R"({"chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}",
                 "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null})");
  write_file(dir.path() / "tokenizer.json", "{}");
  for (const auto& path :
       {dir.path(), dir.path() / "tokenizer_config.json", dir.path() / "tokenizer.json"}) {
    const ChatTemplate tmpl = ChatTemplate::load(path);
    EXPECT_EQ(tmpl.render(kHello, true), "<s>Hello</s>") << path;
    EXPECT_EQ(tmpl.special_tokens(),
              (ChatTemplate::SpecialTokens{{"bos_token", "<s>"}, {"eos_token", "</s>"}}));
  }
}

TEST(ChatTemplateLoad, JinjaFileTakesPrecedenceOverTokenizerConfig) {
  ScratchDir dir;
  write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "from config"})");
  write_file(dir.path() / "chat_template.jinja", "from jinja file {{ messages[0].content }}\n");
  const ChatTemplate tmpl = ChatTemplate::load(dir.path());
  EXPECT_EQ(tmpl.render(kHello, false), "from jinja file Hello");  // one trailing newline dropped
  EXPECT_NE(tmpl.origin().find("chat_template.jinja"), std::string::npos);
}

TEST(ChatTemplateLoad, NamedTemplatesUseDefaultOrToolUse) {
  ScratchDir dir;
  write_file(dir.path() / "tokenizer_config.json",
             R"({"chat_template": [{"name": "default", "template": "plain"},
                                   {"name": "tool_use", "template": "tools: {{ tools|length }}"},
                                   {"name": "rag", "template": "{% include 'never parsed' %}"}]})");
  const ChatTemplate tmpl = ChatTemplate::load(dir.path());
  EXPECT_EQ(tmpl.render(kHello, true), "plain");
  EXPECT_EQ(tmpl.render(kHello, true, ordered_json{{"tools", ordered_json::array({1, 2})}}),
            "tools: 2");
  EXPECT_EQ(tmpl.render(kHello, true, ordered_json{{"tools", nullptr}}), "plain");
}

TEST(ChatTemplateLoad, AdditionalChatTemplatesFolder) {
  ScratchDir dir;
  write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "from config"})");
  write_file(dir.path() / "additional_chat_templates" / "default.jinja", "folder default");
  EXPECT_EQ(ChatTemplate::load(dir.path()).render(kHello, true), "folder default");
}

TEST(ChatTemplateLoad, LegacySpecialTokensMap) {
  ScratchDir dir;
  write_file(dir.path() / "tokenizer_config.json",
             R"({"chat_template": "{{ bos_token }}|{{ eos_token }}"})");
  write_file(dir.path() / "special_tokens_map.json",
             R"({"bos_token": {"content": "<B>"}, "eos_token": "<E>"})");
  EXPECT_EQ(ChatTemplate::load(dir.path()).render(kHello, true), "<B>|<E>");
}

TEST(ChatTemplateLoad, Qwen3FixtureKnowsItsTokens) {
  const ChatTemplate tmpl = ChatTemplate::load(testing::chat_fixtures_dir() / "qwen3");
  EXPECT_EQ(tmpl.special_tokens(), (ChatTemplate::SpecialTokens{{"eos_token", "<|im_end|>"},
                                                                {"pad_token", "<|endoftext|>"}}));
  EXPECT_EQ(tmpl.render(kHello, true),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateLoad, ErrorsNameTheFile) {
  ScratchDir dir;
  EXPECT_EQ(ChatTemplate::load_if_present(dir.path()), std::nullopt);
  EXPECT_NE(error_of([&] {
              ChatTemplate::load(dir.path());
            }).find(dir.path().string() + ": no chat template"),
            std::string::npos);

  write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "x" )");
  EXPECT_NE(
      error_of([&] { ChatTemplate::load(dir.path()); }).find("tokenizer_config.json: invalid JSON"),
      std::string::npos);

  write_file(dir.path() / "tokenizer_config.json",
             R"({"chat_template": "ok\n{% for m in messages %}{{ m }"})");
  // A syntax error is raised by render, not by load (issue 19: a broken template must not block
  // requests that never render it).
  EXPECT_EQ(error_of([&] { ChatTemplate::load(dir.path()); }), "(no error)");
  const std::string syntax = error_of([&] { ChatTemplate::load(dir.path()).render(kHello, true); });
  EXPECT_NE(syntax.find("tokenizer_config.json line 2: "), std::string::npos) << syntax;

  write_file(dir.path() / "tokenizer_config.json",
             R"({"chat_template": "{{ raise_exception('no system role') }}"})");
  const std::string raised = error_of([&] { ChatTemplate::load(dir.path()).render(kHello, true); });
  EXPECT_NE(raised.find("tokenizer_config.json line 1: no system role"), std::string::npos)
      << raised;

  EXPECT_NE(error_of([&] { ChatTemplate::load(dir.path() / "missing"); }).find("no such file"),
            std::string::npos);
}

// The built-in templates reproduce the prompt strings recorded in model-specs.
TEST(ChatTemplateBuiltin, LladaMatchesModelSpecs) {
  EXPECT_EQ(ChatTemplate::builtin("llada").render(kHello, true),
            "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(
      ChatTemplate::builtin("llada").render(
          ordered_json::parse(
              R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])"),
          true),
      "<|startoftext|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_"
      "header_id|>\n\n");
}

TEST(ChatTemplateBuiltin, Llada2MatchesModelSpecs) {
  EXPECT_EQ(
      ChatTemplate::builtin("llada2_moe").render(kHello, true),
      "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hello<|role_end|>"
      "<role>ASSISTANT</role>");
}

TEST(ChatTemplateBuiltin, WedlmIsChatML) {
  EXPECT_EQ(ChatTemplate::builtin("wedlm").render(kHello, true),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateBuiltin, UnknownFamilyIsAnError) {
  EXPECT_EQ(error_of([] { ChatTemplate::builtin("gpt2"); }),
            "no built-in chat template for family 'gpt2' (built-in: llada, llada2_moe, wedlm)");
  EXPECT_EQ(ChatTemplate::builtin_families(),
            (std::vector<std::string>{"llada", "llada2_moe", "wedlm"}));
}

TEST(ChatTemplateRender, RejectsBadArguments) {
  const ChatTemplate tmpl = ChatTemplate::builtin("wedlm");
  EXPECT_NE(error_of([&] { tmpl.render(ordered_json::array(), true); }).find("empty conversation"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { tmpl.render(ordered_json::object(), true); }).find("must be a JSON array"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              tmpl.render(ordered_json::parse(R"(["hi"])"), true);
            }).find("message 0 is not a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              tmpl.render(kHello, true, ordered_json{{"messages", 1}});
            }).find("'messages'"),
            std::string::npos);
  ordered_json deep = ordered_json::array();
  for (int i = 0; i < 2000; ++i) deep = ordered_json::array({deep});
  ordered_json messages = kHello;
  messages[0]["meta"] = deep;
  EXPECT_NE(error_of([&] { tmpl.render(messages, true); }).find("nested too deeply"),
            std::string::npos);
}

TEST(ChatTemplateRender, AcceptsPlainJson) {
  const nlohmann::json messages = nlohmann::json::parse(R"([{"role": "user", "content": "Hi"}])");
  EXPECT_EQ(ChatTemplate::builtin("wedlm").render(messages, false),
            "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplateRender, ToolsAndDocumentsDefaultToNone) {
  const ChatTemplate tmpl = ChatTemplate::from_source(
      "{{ tools is none }} {{ documents is none }} {{ enable_thinking is defined }} {{ "
      "add_generation_prompt }}",
      "t");
  EXPECT_EQ(tmpl.render(kHello, true), "True True False True");
  EXPECT_EQ(tmpl.render(kHello, false, ordered_json{{"enable_thinking", false}}),
            "True True True False");
}

}  // namespace
}  // namespace dllm
