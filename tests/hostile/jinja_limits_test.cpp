// Chat templates under hostile input (issue 19): every resource limit of a render (limits.h)
// ends the render quickly with an error naming the limit and the template line.
#include <gtest/gtest.h>

#include <chrono>

#include "hostile/hostile_test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/limits.h"
#include "tokenizer/jinja/template.h"

namespace dllm {
namespace {

using hostile::contains;
using hostile::error_of;

// Renders `source` and returns its error; also checks the render gave up quickly.
std::string render_error(const std::string& source) {
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of([&] {
    jinja::Template(source, "t").render(nlohmann::ordered_json{{"s", "abc"}});
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << source;
  return e;
}

void expect_limit(const std::string& source, const std::string& limit) {
  const std::string e = render_error(source);
  EXPECT_TRUE(contains(e, "template limit " + limit)) << source << "\n -> " << e;
  EXPECT_TRUE(contains(e, "t line ")) << e;
}

TEST(HostileJinja, StringRepetition) {
  expect_limit("{{ 'x' * 10**9 }}", "max_string_bytes");
  expect_limit("{{ 'x' * 9223372036854775807 }}", "max_string_bytes");
  expect_limit("{{ ['abcdefgh'] * 10**7 }}", "max_");
  expect_limit("{{ [1] * 10**7 }}", "max_list_items");
}

TEST(HostileJinja, GrowthByConcatenationInLoops) {
  expect_limit(
      "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      "max_string_bytes");
  expect_limit(
      "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(100000) %}"
      "{% set ns.t = ns.s + 'y' %}{% endfor %}",
      "max_processed_bytes");
  expect_limit(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
      "{% endfor %}",
      "max_list_items");
}

// A namespace is the one container a template mutates; storing it inside itself (directly or
// through other values) would leak the cycle and make printing it recurse forever.
TEST(HostileJinja, ANamespaceCannotContainItself) {
  for (const std::string source :
       {"{% set ns = namespace() %}{% set ns.u = ns %}",
        "{% set ns = namespace() %}{% set ns.u = [1, {'a': [ns]}] %}{{ ns }}",
        "{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = b %}"}) {
    const std::string e = render_error(source);
    EXPECT_TRUE(contains(e, "inside itself")) << source << "\n -> " << e;
  }
  // Values that merely hold the same namespace twice, or another namespace, are fine.
  EXPECT_EQ(jinja::Template("{% set a = namespace(x=1) %}{% set b = namespace() %}"
                            "{% set b.p = [a, a] %}{{ b.p[1].x }}",
                            "t")
                .render(nlohmann::ordered_json::object()),
            "1");
}

TEST(HostileJinja, LongLoopsAndSteps) {
  expect_limit("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               "max_steps");
  expect_limit("{{ range(10**12) | length }}", "max_range");
  expect_limit("{{ range(-9223372036854775807 - 1, 9223372036854775807) | length }}", "max_range");
}

TEST(HostileJinja, QuadraticBuiltinsChargeTheirWork) {
  expect_limit(
      "{% set l = range(100000) | list %}{% for i in range(100000) %}"
      "{% if i in l %}{% endif %}{% endfor %}",
      "max_steps");
  expect_limit(
      "{% set l = range(100000) | list %}{{ (l + l + l + l) | unique | length }}"
      "{{ (l + l) | unique | length }}{{ l | unique | length }}",
      "max_steps");
}

TEST(HostileJinja, OutputSize) {
  expect_limit("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", "max_string_bytes");
}

TEST(HostileJinja, Recursion) {
  expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "max_macro_depth");
  expect_limit("{% macro f(n) %}{{ f(n) ~ f(n) }}{% endmacro %}{{ f(0) }}", "max_");
}

TEST(HostileJinja, AmplifyingBuiltins) {
  expect_limit(
      "{{ ('x' * 1000000) | replace('x', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}",
      "max_string_bytes");
  expect_limit("{{ ('x' * 1000000).replace('', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}",
               "max_string_bytes");
  expect_limit("{{ 'a\nb' | indent(10**12) }}", "max_string_bytes");
  expect_limit("{{ ('a\n' * 1000000) | indent('          ' * 10) }}", "max_string_bytes");
  expect_limit("{{ range(100000) | join('x' * 1000) }}", "max_string_bytes");
  expect_limit("{{ ('x' * 1000).join(['a'] * 100000) }}", "max_string_bytes");
  expect_limit("{{ [1, [2]] | tojson(indent=10**12) }}", "max_string_bytes");
  expect_limit("{{ '%999999999999999999999s' % 'a' }}", "max_string_bytes");
  expect_limit("{{ '%.99999999999f' % 1.5 }}", "max_string_bytes");
}

TEST(HostileJinja, SharedListsCannotExplodeText) {
  // 40 assignments describe a tree of 2^40 leaves; printing it must stop at the string limit.
  std::string source = "{% set a0 = ['x'] %}";
  for (int i = 1; i <= 40; ++i)
    source += "{% set a" + std::to_string(i) + " = [a" + std::to_string(i - 1) + ", a" +
              std::to_string(i - 1) + "] %}";
  expect_limit(source + "{{ a40 }}", "max_string_bytes");
  expect_limit(source + "{{ a40 | tojson }}", "max_string_bytes");
}

TEST(HostileJinja, FormatIndicesThatDoNotFitAreErrorsNotCrashes) {
  EXPECT_TRUE(contains(render_error("{{ '{99999999999999999999999}'.format(1) }}"),
                       "replacement index 99999999999999999999999 out of range"));
  EXPECT_TRUE(contains(render_error("{{ '%d' % 1e300 }}"), "cannot convert float"));
  // An attribute path of many digits (std::stoll would throw std::out_of_range) is a key.
  render_error("{{ [[1, 2]] | map(attribute='99999999999999999999999') | list }}");
}

TEST(HostileJinja, RealisticTemplatesStayFarBelowTheLimits) {
  // A chat-template-like loop over 2000 messages renders.
  const nlohmann::ordered_json message = {{"role", "user"}, {"content", " hello there "}};
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (int i = 0; i < 2000; ++i) messages.push_back(message);
  const auto tmpl = ChatTemplate::from_source(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n"
      "{% endfor %}",
      "t");
  const std::string one = tmpl.render(nlohmann::ordered_json::array({message}), false);
  EXPECT_EQ(tmpl.render(messages, false).size(), 2000 * one.size());
}

TEST(HostileJinja, SyntaxErrorIsRaisedOnRenderOnly) {
  const auto tmpl = ChatTemplate::from_source("{% for m in messages %}{{ m }", "broken template");
  const std::string e = error_of([&] {
    tmpl.render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])"), true);
  });
  EXPECT_TRUE(contains(e, "broken template line 1")) << e;
}

}  // namespace
}  // namespace dllm
