// The interpreter against Python jinja2 (configured as transformers configures it for chat
// templates): fixtures/chat_templates/jinja_cases.json, made by
// tools/make_chat_template_goldens.py.
#include <gtest/gtest.h>

#include "chat_template/test_support.h"
#include "core/error.h"
#include "tokenizer/jinja/template.h"

namespace dllm {
namespace {

using testing::GoldenCase;

class JinjaGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST(JinjaGoldenFile, Loads) {
  EXPECT_GE(testing::load_golden_cases("jinja_cases.json").size(), 100u)
      << "run tools/make_chat_template_goldens.py";
}

TEST_P(JinjaGolden, MatchesPythonJinja2) {
  const nlohmann::ordered_json& c = GetParam().json;
  const std::string source = c["template"].get<std::string>();
  SCOPED_TRACE("template: " + source);
  if (c.contains("expected")) {
    const jinja::Template tmpl(source, "test template");
    EXPECT_EQ(tmpl.render(c["variables"]), c["expected"].get<std::string>());
    return;
  }
  try {
    const jinja::Template tmpl(source, "test template");
    const std::string output = tmpl.render(c["variables"]);
    FAIL() << "rendered " << ::testing::PrintToString(output) << " but Python raised "
           << c["error"].get<std::string>();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("test template line ", 0), 0u) << message;
    if (c.contains("error_line")) {
      const std::string line = "line " + std::to_string(c["error_line"].get<int>()) + ": ";
      EXPECT_NE(message.find(line), std::string::npos)
          << message << "\nPython: " << c["error"].get<std::string>();
    }
    if (c.contains("our_error")) {
      EXPECT_NE(message.find(c["our_error"].get<std::string>()), std::string::npos) << message;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, JinjaGolden,
                         ::testing::ValuesIn(testing::load_golden_cases("jinja_cases.json")),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace dllm
