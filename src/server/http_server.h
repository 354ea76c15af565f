// dllm's OpenAI-compatible HTTP server over one Engine (cpp-httplib: a thread pool of blocking
// workers, one per connection; streams are written by content providers). Uses only the
// public Engine API.
//
//   HttpServer server(engine, options);
//   int port = server.bind();   // port 0: any free one
//   std::thread t([&] { server.run(); });
//   ...
//   server.shutdown();          // drain, cancel after the grace period, stop; run() returns
#pragma once

#include <memory>

#include "dllm/engine.h"
#include "server/server_options.h"

namespace dllm::server {

struct ServerContext;

class HttpServer {
 public:
  HttpServer(Engine& engine, const ServerOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds options.host:options.port and returns the port; Error naming the address on failure.
  int bind();
  // Serves until shutdown() has finished. Call after bind().
  void run();
  // Thread-safe, idempotent: new generation requests get 503, running ones get
  // options.shutdown_grace_seconds to finish and are cancelled after that (their clients get
  // finish_reason "abort"), then the listener and every connection close.
  void shutdown();

  ServerContext& context();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dllm::server
