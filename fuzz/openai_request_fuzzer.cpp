// libFuzzer: an HTTP request body of `dllm serve` through the JSON helper (nesting limit) and the
// OpenAI request parser of both endpoints. Only ApiError / dllm::Error may come out.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/json_file.h"
#include "server/api_error.h"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dllm::server;
  static const ParseContext ctx = [] {
    ParseContext c;
    c.served_model = "tiny-block";
    // A few knob names (the full list is the engine's, which this target does not link).
    c.option_names = {"block-length", "steps", "threshold", "window", "verify-policy"};
    c.vocab_size = 4096;
    c.context_length = 8192;
    c.max_choices = 16;
    // image_url / video_url parts as a vision-language model takes them (data: URLs through
    // the base64 decoder; file:// is refused without an allowed directory, so nothing is read).
    c.accepts_images = true;
    c.max_images = 4;
    c.max_videos = 2;
    c.media.max_image_bytes = 1 << 20;
    c.media.max_video_bytes = 1 << 20;
    return c;
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const Json body = dllm::parse_json_text<Json>(text, "request body");
    for (Endpoint e : {Endpoint::completions, Endpoint::chat}) {
      try {
        (void)parse_api_request(e, body, ctx);
      } catch (const ApiError&) {
      }
    }
  } catch (const dllm::Error&) {
  }
  return 0;
}
