// libFuzzer: config.json text through the JSON helper, family detection, the family's config
// reader and ModelConfig::validate (ranges, 64-bit products).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/json_file.h"
#include "model/families/family.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json config = dllm::parse_json_text(text, "config.json");
    if (!config.is_object()) return 0;
    const dllm::Family& family = dllm::find_family(config, "config.json");
    const dllm::ModelConfig c = family.parse_config(config, "config.json");
    c.validate("config.json");
    (void)c.weight_elements();
    (void)c.context_limit_description();
  } catch (const dllm::Error&) {
  }
  return 0;
}
