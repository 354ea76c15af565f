// Turns ids into text one id at a time for streaming output. A character split across tokens
// (emoji, CJK, ...) is held back until complete, so no chunk ends inside a UTF-8 sequence, and
// the concatenation of all push() results plus flush() equals Tokenizer::decode(all ids).
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace dllm {

class StreamingDetokenizer {
 public:
  StreamingDetokenizer(Tokenizer tokenizer, bool skip_special_tokens)
      : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {}

  // Text that became complete with this id (often empty mid-character). Throws for an id with no
  // token, like decode().
  std::string push(int32_t id);
  // The held-back rest: an unfinished character at the end of the stream becomes U+FFFD, as in
  // decode(). The detokenizer can be reused afterwards.
  std::string flush();

 private:
  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of an unfinished UTF-8 character
};

}  // namespace dllm
