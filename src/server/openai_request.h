// Bodies of POST /v1/completions and /v1/chat/completions as dllm::Requests, following OpenAI's
// API and vLLM's extensions:
//   completions: prompt (a string, a list of strings, a list of token ids, or a list of lists)
//   chat:        messages ([{role, content}], content a string or a list of {type: text} and,
//                for a vision-language model, {type: image_url} and vLLM's {type: video_url}
//                parts (server/media_url.h)), chat_template_kwargs, and vLLM's
//                media_io_kwargs ({"video": {"num_frames": N}}: frames sampled per video)
//   both:        model, max_tokens (chat also max_completion_tokens), temperature, top_p, top_k
//                (-1 or 0: off), seed, stop, stop_token_ids, ignore_eos, n, stream,
//                stream_options.include_usage, return_token_ids, and dLLM keys: strategy and
//                every strategy knob by its option name ("block_length": 4, "threshold": 0.9),
//                "dllm": {"stream_provisional": true}, "sparse_prefill": a config name of the
//                server's --sparse-prefill-dir or "none" (MMInference sparse prefill).
// Fields OpenAI defines that dllm cannot honour (logprobs, echo, penalties, tools, ...) are
// accepted at their neutral values and refused otherwise; keys nobody defines are ignored, as
// vLLM does. Pure parsing: no engine, so the fuzz test can drive it alone.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dllm/engine.h"
#include "server/json_fields.h"
#include "server/media_url.h"

namespace dllm::server {

enum class Endpoint { completions, chat };

// What the parser checks against.
struct ParseContext {
  std::string served_model;            // `model` must name it (when given)
  std::set<std::string> option_names;  // Engine::option_names(), '-' spelling
  int64_t vocab_size = 0;              // token ids in prompts and stop_token_ids
  int64_t context_length = 0;          // max_tokens at most this
  int max_choices = 128;               // prompts x n
  // image_url / video_url content parts: only a vision-language model takes them
  // (ModelInfo::has_vision).
  bool accepts_images = false;
  int max_images = 8;         // per request
  int max_videos = 2;         // per request
  int32_t video_frames = 32;  // frames per video unless media_io_kwargs says otherwise
  MediaUrlPolicy media;
  // "sparse_prefill": "none" and the configs of --sparse-prefill-dir by name
  // (Engine::sparse_prefill_names()); never a path.
  std::set<std::string> sparse_prefill_names;
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::completions;
  std::vector<Request> prompts;  // one per prompt (chat: one); sampling fields and knobs set
  int n = 1;                     // choices per prompt
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  bool stream_provisional = false;  // dllm.stream_provisional
  bool return_token_ids = false;
};

// The frames per video of a media_io_kwargs object ({"video": {"num_frames": N}}, vLLM's request
// field and --media-io-kwargs flag), or nullopt when it names none; `where` is its name in
// errors. Other video keys (fps, ...) are refused: dllm samples a fixed number of frames.
std::optional<int32_t> media_io_video_frames(const Json& kwargs, const std::string& where);

// ApiError (400, or 404 for an unknown model) naming the field at fault.
ApiRequest parse_api_request(Endpoint endpoint, const Json& body, const ParseContext& ctx);

}  // namespace dllm::server
