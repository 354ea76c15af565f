#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dllm {

namespace {

void add_steps(const nlohmann::json& spec, const std::string& file,
               std::vector<Normalizer::Step>& steps) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    fail(file, ": normalizer must be an object with a string \"type\"");
  const std::string type = spec["type"].get<std::string>();
  if (type == "NFC") {
    steps.push_back(Normalizer::Step::kNfc);
  } else if (type == "Sequence") {
    if (!spec.contains("normalizers") || !spec["normalizers"].is_array())
      fail(file, ": normalizer Sequence needs a \"normalizers\" array");
    for (const auto& child : spec["normalizers"]) add_steps(child, file, steps);
  } else {
    fail(file, ": normalizer type '", type, "' is not supported (supported: NFC, Sequence)");
  }
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& spec, const std::string& file) {
  Normalizer n;
  if (spec.is_null()) return n;
  add_steps(spec, file, n.steps_);
  return n;
}

std::string nfc(std::string_view text) {
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalisation failed: ", utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
  return out;
}

std::string_view Normalizer::apply(std::string_view text, std::string& storage) const {
  std::string_view current = text;
  for (Step step : steps_) {
    switch (step) {
      case Step::kNfc:
        if (utf8::is_ascii(current)) break;  // ASCII text is already in NFC
        storage = nfc(current);
        current = storage;
        break;
    }
  }
  return current;
}

}  // namespace dllm
