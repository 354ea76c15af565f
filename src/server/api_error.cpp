#include "server/api_error.h"

#include <algorithm>

namespace dllm::server {

void bad_request(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", param, message);
}

ApiError engine_error(const std::string& message, const std::string& fallback_param) {
  std::string param = fallback_param;
  if (message.rfind("--", 0) == 0) {
    const size_t end = message.find_first_of(" =", 2);
    param = message.substr(2, end == std::string::npos ? std::string::npos : end - 2);
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
