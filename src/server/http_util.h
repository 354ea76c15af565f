// Small pieces every route uses: JSON bodies in, JSON and errors out.
#pragma once

#include <httplib.h>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace dllm::server {

// The request body as JSON (nesting at most kJsonDepthLimit); 400 with the position otherwise.
Json parse_body(const httplib::Request& req);

void send_json(httplib::Response& res, int status, const Json& body);
void send_error(httplib::Response& res, const ApiError& e);

// Runs a handler, turning what it throws into error responses: ApiError as it says, a
// dllm::Error as 400, anything else as 500 (the message, never a crash).
template <class F>
void guarded(httplib::Response& res, F&& handler);

}  // namespace dllm::server

#include "server/http_util_impl.h"
