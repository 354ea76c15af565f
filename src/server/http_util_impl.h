// Template part of server/http_util.h.
#pragma once

#include <exception>

#include "dllm/error.h"

namespace dllm::server {

template <class F>
void guarded(httplib::Response& res, F&& handler) {
  try {
    handler();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, ApiError(400, "invalid_request_error", "", e.what()));
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, "server_error", "", e.what()));
  }
}

}  // namespace dllm::server
