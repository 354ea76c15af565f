// libFuzzer: tokenizer.json text through the SAX loader and the BPE model, then a short encode /
// decode round trip with whatever loaded.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const dllm::Tokenizer tokenizer = dllm::Tokenizer::from_json_text(text, "tokenizer.json");
    const std::vector<int32_t> ids = tokenizer.encode("Hello, world! <|im_start|> 123");
    (void)tokenizer.decode(ids, true);
    for (int32_t id = 0; id < tokenizer.vocab_size() && id < 64; ++id)
      if (tokenizer.has_token(id)) (void)tokenizer.token_bytes(id);
  } catch (const dllm::Error&) {
  }
  return 0;
}
