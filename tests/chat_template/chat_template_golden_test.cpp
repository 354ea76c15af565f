// Chat templates against transformers' apply_chat_template(tokenize=False): the real Qwen3
// template, synthetic Llama-3 / Qwen2.5-style templates and the built-in ones, rendered by
// tools/make_chat_template_goldens.py into fixtures/chat_templates/chat_cases.json.
#include <gtest/gtest.h>

#include <fstream>

#include "chat_template/test_support.h"
#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/chat_template.h"

namespace dllm {
namespace {

using testing::GoldenCase;

nlohmann::ordered_json golden_templates() {
  std::ifstream in(testing::chat_fixtures_dir() / "chat_cases.json");
  const nlohmann::ordered_json root = nlohmann::ordered_json::parse(in);
  return root["templates"];
}

ChatTemplate make_template(const std::string& id) {
  const nlohmann::ordered_json spec = golden_templates().at(id);
  if (spec.contains("tokenizer_config"))
    return ChatTemplate::load(testing::chat_fixtures_dir() /
                              spec["tokenizer_config"].get<std::string>());
  if (spec.contains("builtin")) return ChatTemplate::builtin(spec["builtin"].get<std::string>());
  ChatTemplate::SpecialTokens tokens;
  for (const auto& [key, value] : spec["special_tokens"].items())
    tokens[key] = value.get<std::string>();
  const auto path = testing::chat_fixtures_dir() / spec["source_file"].get<std::string>();
  return ChatTemplate::from_source(read_text_file(path), "chat template " + path.string(), tokens);
}

class ChatTemplateGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST(ChatTemplateGoldenFile, Loads) {
  EXPECT_GE(testing::load_golden_cases("chat_cases.json").size(), 50u)
      << "run tools/make_chat_template_goldens.py";
}

TEST_P(ChatTemplateGolden, MatchesTransformers) {
  const nlohmann::ordered_json& c = GetParam().json;
  const ChatTemplate tmpl = make_template(c["template"].get<std::string>());
  const auto render = [&] {
    return tmpl.render(c["messages"], c["add_generation_prompt"].get<bool>(), c["extra_vars"]);
  };
  if (c.contains("expected")) {
    EXPECT_EQ(render(), c["expected"].get<std::string>());
  } else {
    EXPECT_THROW(render(), Error) << "transformers raised " << c["error"].get<std::string>();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ChatTemplateGolden,
    ::testing::ValuesIn(testing::load_golden_cases("chat_cases.json", "template")),
    [](const ::testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });

}  // namespace
}  // namespace dllm
