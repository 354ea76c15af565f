// TextGenerator: text (or chat messages) in, text out — the tokenizer, the chat template, stop
// strings and UTF-8-safe streaming around the token-level Engine. The CLI and (later) the server
// use it; checkpoints without a tokenizer still work through prompt ids.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace dllm {

struct TextRequest {
  std::vector<int32_t> prompt_ids;  // used as is when non-empty (no tokenizer needed)
  std::string prompt;               // raw text, encoded without special tokens added
  std::optional<nlohmann::ordered_json> messages;  // chat: rendered by the chat template instead
  nlohmann::ordered_json template_vars = nlohmann::ordered_json::object();  // enable_thinking, ...
  DecodeParams params;            // unresolved: family defaults are filled in
  std::vector<std::string> stop;  // stop strings (excluded from the text)
};

struct TextResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;  // generated ids, stop token excluded
  std::string text;          // their text, special tokens skipped, cut before a stop string
  std::string finish_reason;
  DecodeParams params;  // as resolved
  GenerationStats stats;
};

// Text as it becomes final; concatenated it equals TextResult::text.
using TextCallback = std::function<void(std::string_view)>;

class TextGenerator {
 public:
  // Loads the model directory's tokenizer and chat template when it has them (a family built-in
  // template otherwise, where one exists).
  TextGenerator(const Model& model, Backend& backend);

  const std::optional<Tokenizer>& tokenizer() const { return tokenizer_; }
  const std::optional<ChatTemplate>& chat_template() const { return chat_template_; }
  // The prompt ids a request stands for (rendering and tokenizing as needed).
  std::vector<int32_t> prompt_ids(const TextRequest& request) const;
  // Stop ids: the checkpoint's (eos, generation_config.json) plus end-of-turn tokens the
  // tokenizer knows (<|im_end|>, <|eot_id|>, <|role_end|>).
  std::vector<int64_t> stop_ids() const;

  TextResult generate(const TextRequest& request, const TextCallback& on_text = {},
                      const TraceCallback& trace = {});

 private:
  const Model& model_;
  Engine engine_;
  std::optional<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
};

}  // namespace dllm
