// Tokenizer: a Hugging Face tokenizer.json (byte-level BPE, as used by Qwen2/2.5/3, LLaDA, SDAR,
// Dream, WeDLM ...) loaded once and shared cheaply by copy (the state is immutable; the word cache
// inside is thread-safe), so encode/decode may run on many threads at once.
//
// Semantics follow Hugging Face `tokenizers`:
//  - encode(text) == Tokenizer.encode(text, add_special_tokens=False).ids. We never add the post-
//    processor's special tokens (chat templates write them explicitly), so post_processor
//    ByteLevel / TemplateProcessing / Roberta / Bert are accepted and have no effect on ids.
//    Added tokens written in the text (e.g. "<|im_start|>") become their single ids
//    (split_special_tokens=False).
//  - decode(ids, skip) == Tokenizer.decode(ids, skip_special_tokens=skip), except that an id with
//    no token is an error here (Hugging Face silently drops it; see has_token()).
// Unsupported tokenizer.json features are rejected at load time with an error naming the feature.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dllm {

struct TokenizerData;

class Tokenizer {
 public:
  // `path_or_dir`: a tokenizer.json file, or a checkpoint directory containing one.
  static Tokenizer load(const std::filesystem::path& path_or_dir);
  // The contents of a tokenizer.json; `name` stands for the file in error messages.
  static Tokenizer from_json_text(std::string_view text, std::string name);

  // Throws dllm::Error if `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text) const;
  // Throws dllm::Error for an id that has no token.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's vocabulary spelling (byte-level, e.g. "Ġthe"); throws for an id with no token.
  std::string id_to_token(int32_t id) const;
  // One past the largest token id (model vocabulary and added tokens).
  int32_t vocab_size() const;
  // True when `id` names a token. Models often have more rows than the tokenizer has tokens
  // (padded vocabularies); generation skips such ids when it turns ids into text, as Hugging
  // Face's decode does.
  bool has_token(int32_t id) const;
  // True for added tokens marked "special" (those decode(..., true) drops).
  bool is_special(int32_t id) const;

  // The bytes `id` contributes to decoded text (possibly part of a UTF-8 character). Useful for
  // streaming and for per-token byte output. Throws for an id with no token.
  std::string token_bytes(int32_t id) const;

  const std::string& source_path() const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerData> data) : data_(std::move(data)) {}
  void check_id(int32_t id, const char* what) const;
  std::shared_ptr<const TokenizerData> data_;
};

}  // namespace dllm
