// What every route handler shares: the engine, the options, the parser's context, admission and
// metrics. Built once by HttpServer; handlers run on the HTTP worker threads concurrently.
#pragma once

#include <atomic>
#include <string>

#include "dllm/engine.h"
#include "server/admission.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/server_options.h"

namespace dllm::server {

struct ServerContext {
  ServerContext(Engine& engine, const ServerOptions& options);

  Engine& engine;
  ServerOptions options;
  ModelInfo info;
  std::string model_name;     // served model name (/v1/models, responses)
  int64_t max_prompt_tokens;  // options' or the context length
  ParseContext parse;
  Admission admission;
  ServerMetrics metrics;
  std::atomic<int64_t> open_responses{0};  // generation responses still being written
};

}  // namespace dllm::server
