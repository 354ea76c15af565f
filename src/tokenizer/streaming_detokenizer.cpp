#include "tokenizer/streaming_detokenizer.h"

#include "tokenizer/utf8.h"

namespace dllm {

std::string StreamingDetokenizer::push(int32_t id) {
  std::string bytes = tokenizer_.token_bytes(id);  // also rejects unknown ids
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return {};
  pending_ += bytes;
  // Everything but an unfinished sequence at the end is final: lossy decoding never revisits it.
  const size_t keep = utf8::incomplete_tail_length(pending_);
  std::string text;
  utf8::append_lossy(std::string_view(pending_).substr(0, pending_.size() - keep), text);
  pending_.erase(0, pending_.size() - keep);
  return text;
}

std::string StreamingDetokenizer::flush() {
  std::string text;
  utf8::append_lossy(pending_, text);
  pending_.clear();
  return text;
}

}  // namespace dllm
