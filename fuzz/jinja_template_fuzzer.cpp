// libFuzzer: a chat template's source through the Jinja lexer, parser, scope analysis and
// renderer, with a small conversation. Render limits (limits.h) must end every input quickly.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+3?"},
    {"role": "assistant", "content": "5", "reasoning_content": "2+3=5"},
    {"role": "user", "content": "And 4*4?"}])");
  static const nlohmann::ordered_json extra = {{"enable_thinking", false}};
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const auto tmpl = dllm::ChatTemplate::from_source(source, "fuzz template",
                                                      {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    (void)tmpl.render(messages, true, extra);
  } catch (const dllm::Error&) {
  }
  return 0;
}
