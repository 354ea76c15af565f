// Response bodies of the completion endpoints, as OpenAI's API shapes them: whole responses,
// streamed chunks (Server-Sent Events), the usage chunk and dllm's provisional chunks.
//   completions: object "text_completion",       choices[i].text
//   chat:        object "chat.completion(.chunk)", choices[i].message / delta {role, content}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/json_fields.h"
#include "server/openai_request.h"

namespace dllm::server {

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// What one choice produced.
struct ChoiceResult {
  std::string text;
  std::vector<int32_t> token_ids;
  std::string finish_reason;  // stop | length (cancelled requests: abort)
};

// The response's identity, repeated in every chunk.
struct ResponseHead {
  Endpoint endpoint = Endpoint::completions;
  std::string id;  // cmpl-... / chatcmpl-...
  int64_t created = 0;
  std::string model;
};

ResponseHead new_response_head(Endpoint endpoint, const std::string& model);

// OpenAI's finish_reason for the engine's (stop, length; cancelled -> abort, as vLLM).
std::string api_finish_reason(const std::string& engine_reason);

Json usage_json(const Usage& u);

// The whole (non-streamed) response.
Json full_response(const ResponseHead& head, const std::vector<ChoiceResult>& choices,
                   const Usage& usage, bool return_token_ids);

// One streamed chunk of choice `index`: new text (and ids when asked), or its end
// (finish_reason set). `role` starts a chat choice. `usage_null`: stream_options.include_usage
// wants "usage": null on every chunk but the last.
struct ChunkDelta {
  int index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::optional<std::string> finish_reason;
  bool role = false;
};
Json stream_chunk(const ResponseHead& head, const ChunkDelta& d, bool return_token_ids,
                  bool usage_null);
// The last chunk when include_usage: no choices, the usage.
Json usage_chunk(const ResponseHead& head, const Usage& usage);
// dllm's provisional view of choice `index` after a forward: no choices (clients accumulating
// content ignore it), a "dllm" object marked provisional with the undecided region's text
// (masks shown as U+2591) and ids. Never part of the committed text.
Json provisional_chunk(const ResponseHead& head, int index, int64_t forward,
                       int64_t committed_tokens, const std::string& text,
                       const std::vector<int32_t>& token_ids);

// "data: <json>\n\n" (invalid UTF-8 replaced, which committed text never has).
std::string sse_event(const Json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace dllm::server
