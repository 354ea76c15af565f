// The HTTP routes, one handler each (http_server.cpp registers them):
//   POST /v1/completions, /v1/chat/completions  generation_route.cpp
//   GET  /v1/models, /health, /metrics          info_routes.cpp
//   POST /tokenize, /detokenize                 info_routes.cpp
#pragma once

#include <httplib.h>

#include "server/openai_request.h"
#include "server/server_context.h"

namespace dllm::server {

void handle_generation(ServerContext& ctx, Endpoint endpoint, const httplib::Request& req,
                       httplib::Response& res);
void handle_models(ServerContext& ctx, httplib::Response& res);
void handle_health(ServerContext& ctx, httplib::Response& res);
void handle_metrics(ServerContext& ctx, httplib::Response& res);
void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace dllm::server
