// Reading tokenizer.json fast: a SAX pass stores model.vocab and model.merges (~300k strings for
// Qwen) straight into compact tables and builds an ordinary JSON tree only for the small rest.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tokenizer/bpe.h"

namespace dllm {

struct TokenizerJson {
  nlohmann::json config;  // the whole document except model.vocab and model.merges
  BpeSource bpe;          // vocab and merges (options are filled in later from `config`)
  bool has_vocab = false;
  bool has_merges = false;
};

// Errors (malformed JSON, wrong shapes of vocab/merges) name `file`.
TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& file);

}  // namespace dllm
