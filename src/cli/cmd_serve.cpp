// dllm serve: the OpenAI-compatible HTTP server (src/server/) over one Engine, with the engine
// options of `generate`. SIGTERM / SIGINT shut it down gracefully: new requests get 503,
// running ones get --shutdown-grace seconds, the rest are cancelled.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "dllm/engine.h"
#include "server/http_server.h"
#include "server/openai_request.h"
#include "server/server_options.h"

namespace dllm::cli {

namespace {

struct ServeArgs {
  EngineConfig engine;
  server::ServerOptions server;
  double max_body_mib = 8;
  std::string media_io_kwargs;  // JSON, as vLLM's flag
};

// Blocks SIGTERM and SIGINT in this thread and every thread started after it, so that one
// thread can take them with sigwait() (no work inside a signal handler).
sigset_t block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

void run_serve(ServeArgs& a) {
  // A client that disconnects mid-write must end that write with EPIPE, not the process.
  signal(SIGPIPE, SIG_IGN);
  const sigset_t signals = block_shutdown_signals();
  finish_engine_config(a.engine);
  if (!(a.max_body_mib > 0) || a.max_body_mib > 4096)
    fail("--max-body-mib must be in (0, 4096] (got ", a.max_body_mib, ")");
  a.server.max_body_bytes = static_cast<size_t>(a.max_body_mib * double(1 << 20));
  a.server.max_running = a.engine.max_running;
  if (a.server.max_images_per_request < 1 || a.server.max_images_per_request > 1024)
    fail("--max-images-per-request must be in 1..1024 (got ", a.server.max_images_per_request,
         ")");
  if (!(a.server.max_image_mib > 0) || a.server.max_image_mib > 1024)
    fail("--max-image-mib must be in (0, 1024] (got ", a.server.max_image_mib, ")");
  if (a.server.max_videos_per_request < 1 || a.server.max_videos_per_request > 64)
    fail("--max-videos-per-request must be in 1..64 (got ", a.server.max_videos_per_request, ")");
  if (!(a.server.max_video_mib > 0) || a.server.max_video_mib > 4096)
    fail("--max-video-mib must be in (0, 4096] (got ", a.server.max_video_mib, ")");
  if (!a.media_io_kwargs.empty()) {
    try {
      const auto kwargs = nlohmann::json::parse(a.media_io_kwargs);
      if (auto frames = server::media_io_video_frames(kwargs, "--media-io-kwargs"))
        a.server.video_frames = *frames;
    } catch (const std::exception& e) {  // bad JSON, or an ApiError naming the key
      fail("--media-io-kwargs '", a.media_io_kwargs, "': ", e.what(),
           " (expected e.g. '{\"video\": {\"num_frames\": 32}}')");
    }
  }
  Engine engine(a.engine);
  server::HttpServer http(engine, a.server);
  const int port = http.bind();
  const ModelInfo info = engine.model_info();
  std::printf("dllm serve: listening on http://%s:%d (model %s, %s, %s)\n", a.server.host.c_str(),
              port, info.dir.c_str(), info.family.c_str(), info.device.c_str());
  std::fflush(stdout);
  std::atomic<bool> signalled{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    signalled = true;
    std::fprintf(stderr, "dllm serve: signal %d, shutting down (grace %.0f s)\n", sig,
                 a.server.shutdown_grace_seconds);
    http.shutdown();
  });
  http.run();
  if (!signalled) pthread_kill(waiter.native_handle(), SIGTERM);  // run() ended on its own
  waiter.join();
  std::fprintf(stderr, "dllm serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (completions, chat, SSE streaming, metrics)");
  auto a = std::make_shared<ServeArgs>();
  add_engine_options(*cmd, a->engine);
  server::ServerOptions& s = a->server;
  cmd->add_option("--host", s.host, "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", s.port, "Port (default 8000; 0: any free port, printed at start)");
  cmd->add_option("--api-key", s.api_key,
                  "Require \"Authorization: Bearer KEY\" on /v1/*, /tokenize, /detokenize");
  cmd->add_option("--served-model-name", s.served_model_name,
                  "Model name of the API (default: the model directory's name)");
  cmd->add_option("--max-queued", s.max_queued,
                  "Requests that may wait beyond --max-running; past that 429 + Retry-After "
                  "(default 256)");
  cmd->add_option("--max-body-mib", a->max_body_mib, "Largest request body in MiB (default 8)");
  cmd->add_option("--max-prompt-tokens", s.max_prompt_tokens,
                  "Longest prompt in tokens (default: the model's context length)");
  cmd->add_option("--max-choices", s.max_choices,
                  "Prompts x n one request may ask for (default 128)");
  cmd->add_option("--shutdown-grace", s.shutdown_grace_seconds,
                  "SIGTERM: seconds running requests get before they are cancelled (default 30)");
  cmd->add_option("--http-threads", s.threads,
                  "HTTP worker threads (default: --max-running + --max-queued + 32)");
  cmd->add_option("--max-images-per-request", s.max_images_per_request,
                  "Vision-language models: image_url parts one request may carry (default 8)");
  cmd->add_option("--max-image-mib", s.max_image_mib,
                  "Vision-language models: largest encoded image in MiB (default 10)");
  cmd->add_option("--max-videos-per-request", s.max_videos_per_request,
                  "Vision-language models: video_url parts one request may carry (default 2)");
  cmd->add_option("--max-video-mib", s.max_video_mib,
                  "Vision-language models: largest encoded video in MiB (default 64; a data: "
                  "URL is also bound by --max-body-mib)");
  cmd->add_option("--media-io-kwargs", a->media_io_kwargs,
                  "Vision-language models, as vLLM: '{\"video\": {\"num_frames\": N}}' frames "
                  "sampled per video (default 32; a request's media_io_kwargs overrides it)");
  cmd->add_option("--allowed-local-media-path", s.allowed_local_media_path,
                  "Vision-language models: read file:// image and video URLs under this "
                  "directory (default: none; the server never fetches http(s) URLs)");
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace dllm::cli
