// What `dllm serve` is told on its command line beyond the engine's own options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dllm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless asked: the server has no TLS
  int port = 8000;                 // 0: any free port (printed at start-up)
  std::string api_key;             // empty: no authentication
  // Requests (each choice of `n` counts) that may wait for a running slot: past
  // max_running + max_queued in flight a request gets 429 with Retry-After.
  int64_t max_queued = 256;
  int64_t max_running = 256;                // the engine's --max-running (EngineConfig)
  size_t max_body_bytes = size_t{8} << 20;  // request bodies larger get 413
  int64_t max_prompt_tokens = 0;            // 0: the model's context length
  int max_choices = 128;                    // prompts x n of one request
  double shutdown_grace_seconds = 30;       // SIGTERM: time running requests get to finish
  int threads = 0;                          // HTTP workers; 0: enough for every admitted request
  std::string served_model_name;            // empty: the model directory's name
  // Vision-language models: image_url / video_url content parts (server/media_url.h).
  int max_images_per_request = 8;
  int max_videos_per_request = 2;
  double max_image_mib = 10;               // encoded bytes of one image
  double max_video_mib = 64;               // encoded bytes of one video
  int32_t video_frames = 32;               // frames per video (--media-io-kwargs; vLLM's 32)
  std::string allowed_local_media_path;    // file:// URLs under it; empty: refused
};

}  // namespace dllm::server
