// OpenAI-style errors: every request the server refuses gets an HTTP status and a body
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature",
//              "code": null}}
// naming the field at fault (`param`), so clients (the `openai` package raises BadRequestError
// with it) and people can see what to fix.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace dllm::server {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string param, const std::string& message)
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)) {}
  int status;
  std::string type;   // invalid_request_error | authentication_error | ...
  std::string param;  // the request field at fault; empty: none
};

// 400 invalid_request_error naming `param`.
[[noreturn]] void bad_request(const std::string& param, const std::string& message);

// A dllm::Error from the engine (submit, tokenizer, chat template) as a 400. Engine messages
// name command-line flags ("--max-tokens must be positive (got 0)"); the first flag named becomes
// the field ("max_tokens"), else `fallback_param`; a message that starts with a field path
// ("messages[0].content[1]: ...", an image the engine could not decode) names that field.
ApiError engine_error(const std::string& message, const std::string& fallback_param);

nlohmann::ordered_json error_body(const ApiError& e);

}  // namespace dllm::server
