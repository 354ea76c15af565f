// Interpreter behaviour that the Python goldens cannot pin down: our error wording, limits,
// the clock, and values passed from C++.
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace dllm::jinja {
namespace {

std::string render(std::string_view source,
                   const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) {
  return Template(source, "chat template").render(variables);
}

std::string error_of(std::string_view source,
                     const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) {
  try {
    render(source, variables);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JinjaErrors, UnsupportedTagNamesTagAndLine) {
  EXPECT_EQ(error_of("line 1\nline 2\n{% include 'other.j2' %}"),
            "chat template line 3: unsupported tag 'include'");
  EXPECT_EQ(error_of("{% call foo() %}x{% endcall %}"),
            "chat template line 1: unsupported tag 'call'");
  EXPECT_EQ(error_of("{% for x in xs recursive %}{% endfor %}"),
            "chat template line 1: unsupported: recursive for loops");
}

TEST(JinjaErrors, SyntaxErrorsCarryTheLine) {
  EXPECT_EQ(error_of("a\nb\n{{ 1 + }}"),
            "chat template line 3: expected an expression, got end of print statement '}}'");
  EXPECT_EQ(error_of("{% if x %}\n\nno end"),
            "chat template line 1: 'if' tag is never closed (expected 'endif')");
  EXPECT_EQ(error_of("{{ x | nosuch }}"), "chat template line 1: unsupported filter 'nosuch'");
  EXPECT_EQ(error_of("\n{# never closed"), "chat template line 2: missing end of comment tag '#}'");
  EXPECT_EQ(error_of("{{ x ]] }}"), "chat template line 1: unexpected ']'");
  EXPECT_EQ(error_of("{{ 'a' ? 'b' }}"),
            "chat template line 1: unexpected character '?' inside a tag");
}

TEST(JinjaErrors, RaiseExceptionKeepsTheMessage) {
  EXPECT_EQ(
      error_of("ok\n{{ raise_exception('Conversation roles must alternate user/assistant') }}"),
      "chat template line 2: Conversation roles must alternate user/assistant");
}

TEST(JinjaErrors, RuntimeErrorsNameTheFailingLine) {
  EXPECT_EQ(error_of("{% for m in messages %}\n{{ m.content.upper() }}\n{% endfor %}",
                     {{"messages", {{{"role", "user"}}}}}),
            "chat template line 2: 'dict object' has no attribute 'content'");
  EXPECT_EQ(error_of("{% macro f(x) %}\n{{ x.y.z }}\n{% endmacro %}\n{{ f({}) }}"),
            "chat template line 2: 'dict object' has no attribute 'y'");
}

TEST(JinjaLimits, RunawayRecursionAndNestingAreErrorsNotCrashes) {
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("recursed too deeply"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 10000000000 }}").find("max_string_bytes"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  std::string nested_ifs;
  for (int i = 0; i < 1000; ++i) nested_ifs += "{% if true %}";
  EXPECT_NE(error_of(nested_ifs).find("blocks nested too deeply"), std::string::npos);
  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 2000; ++i) deep = nlohmann::ordered_json::array({deep});
  EXPECT_NE(error_of("{{ x }}", {{"x", deep}}).find("nested too deeply"), std::string::npos);
}

TEST(JinjaGlobals, StrftimeNowUsesTheClock) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const std::string year = std::to_string(local.tm_year + 1900);
  const std::string rendered = render("{{ strftime_now('%Y') }}");
  EXPECT_TRUE(rendered == year || rendered == std::to_string(local.tm_year + 1901)) << rendered;
}

TEST(JinjaValues, FloatsPrintLikePythonRepr) {
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(format_float(1e22), "1e+22");
  EXPECT_EQ(format_float(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(format_float(0.00012), "0.00012");
}

TEST(JinjaValues, JsonInputKeepsKeyOrderAndTypes) {
  const auto variables =
      nlohmann::ordered_json::parse(R"({"d": {"z": 1, "a": [true, null, 2.0, "s"]}})");
  EXPECT_EQ(render("{{ d|tojson }} {{ d }}", variables),
            R"({"z": 1, "a": [true, null, 2.0, "s"]} {'z': 1, 'a': [True, None, 2.0, 's']})");
}

TEST(JinjaValues, TemplateIsReusableAndRendersIndependently) {
  const Template tmpl(
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n "
      "}}",
      "chat template");
  EXPECT_EQ(tmpl.render(nlohmann::ordered_json{{"xs", {1, 2, 3}}}), "6");
  EXPECT_EQ(tmpl.render(nlohmann::ordered_json{{"xs", {10}}}), "10");
}

TEST(JinjaValues, InvalidUtf8BytesSurviveUnchanged) {
  const std::string bytes = "a\xff\xfe b";
  Value variables = make_dict();
  variables.as_dict().set(Value("s"), Value(bytes));
  EXPECT_EQ(Template("{{ s }}|{{ s[::-1][::-1] }}|{{ s|length }}", "t").render(variables),
            bytes + "|" + bytes + "|5");
}

}  // namespace
}  // namespace dllm::jinja
