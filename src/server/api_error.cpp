#include "server/api_error.h"

#include <algorithm>

namespace dllm::server {

void bad_request(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", param, message);
}

ApiError engine_error(const std::string& message, const std::string& fallback_param) {
  std::string param = fallback_param;
  // An error about one part of the request names it first ("messages[0].content[1]: cannot
  // decode PNG: ...": the image's name the server gave the engine).
  if (message.rfind("messages[", 0) == 0) {
    const size_t colon = message.find(": ");
    if (colon != std::string::npos) return ApiError(400, "invalid_request_error",
                                                    message.substr(0, colon), message);
  }
  // The first flag the message names ("prompt (9000 tokens) + --max-tokens 64 exceeds ...").
  size_t at = message.rfind("--", 0) == 0 ? 0 : message.find(" --");
  if (at != std::string::npos) {
    at = message.find("--", at) + 2;
    const size_t end = message.find_first_of(" =,)'", at);
    param = message.substr(at, end == std::string::npos ? std::string::npos : end - at);
    std::replace(param.begin(), param.end(), '-', '_');
  }
  return ApiError(400, "invalid_request_error", param, message);
}

nlohmann::ordered_json error_body(const ApiError& e) {
  nlohmann::ordered_json err = {{"message", e.what()}, {"type", e.type}};
  err["param"] = e.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.param);
  err["code"] = nullptr;
  return {{"error", std::move(err)}};
}

}  // namespace dllm::server
