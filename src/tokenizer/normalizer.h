// tokenizer.json "normalizer": applied to the input text (outside added tokens) before
// pre-tokenization. Supported: null, NFC, and Sequence of supported normalizers.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace dllm {

class Normalizer {
 public:
  Normalizer() = default;  // identity
  // `spec` is the tokenizer.json value (may be null); errors name `file` and the feature.
  static Normalizer from_json(const nlohmann::json& spec, const std::string& file);

  bool is_identity() const { return steps_.empty(); }
  // Returns the normalized text: `text` itself when nothing changes, else a view of `storage`.
  std::string_view apply(std::string_view text, std::string& storage) const;

  enum class Step { kNfc };

 private:
  std::vector<Step> steps_;
};

// Unicode NFC of valid UTF-8 text (utf8proc).
std::string nfc(std::string_view text);

}  // namespace dllm
