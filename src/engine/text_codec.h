// The text side of a request: the checkpoint's tokenizer and chat template (prompt text or chat
// messages -> prompt ids, the stop ids a chat model ends its turn with), and per request a
// TextStream that turns final tokens into UTF-8-safe text as they come and finds stop strings.
// Checkpoints without a tokenizer still work through prompt ids.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dllm/engine.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace dllm {

class TextCodec {
 public:
  // Loads the model directory's tokenizer and chat template when it has them (a family built-in
  // template otherwise, where one exists). `text_dir` overrides where they are read from (a
  // random-weight model has no directory of its own).
  explicit TextCodec(const Model& model, std::filesystem::path text_dir = {});

  const std::optional<Tokenizer>& tokenizer() const { return tokenizer_; }
  const std::optional<ChatTemplate>& chat_template() const { return chat_template_; }
  // The prompt ids a request stands for (rendering and tokenizing as needed); Error when the
  // prompt is missing, given twice, or needs a tokenizer / template the checkpoint lacks.
  std::vector<int32_t> prompt_ids(const Request& request) const;
  std::string render_chat(const std::string& messages_json, bool add_generation_prompt,
                          const std::string& kwargs_json) const;
  // Stop ids: the checkpoint's (eos, generation_config.json) plus end-of-turn tokens the
  // tokenizer knows (<|im_end|>, <|eot_id|>, <|role_end|>).
  std::vector<int64_t> stop_ids() const;
  const Tokenizer& require_tokenizer() const;

 private:
  const Model& model_;
  std::filesystem::path dir_;
  std::optional<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
};

// Incremental detokenization of a request's final tokens with stop-string search; what may
// still turn into a stop string is held back from the stream.
class TextStream {
 public:
  TextStream(const Tokenizer* tokenizer, std::vector<std::string> stops);

  // Consumes the final tokens so far; returns how many to keep when a stop string appeared,
  // else -1.
  int64_t update(std::span<const int32_t> final_tokens);
  // Text of the first `n` kept tokens that can be shown now (`final`: nothing comes after).
  std::string_view visible(size_t n, bool final) const;
  // Flushes an unfinished character at the end of the stream.
  void finish();

 private:
  std::optional<StreamingDetokenizer> detok_;
  const Tokenizer* tok_ = nullptr;
  std::vector<std::string> stops_;
  size_t holdback_ = 0;
  std::string text_;
  std::vector<size_t> token_end_;
  size_t seen_ = 0, search_from_ = 0;
  std::optional<size_t> stop_at_;
};

}  // namespace dllm
