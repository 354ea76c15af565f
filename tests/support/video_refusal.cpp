#include "support/video_refusal.h"

namespace dllm::test {
namespace {

// `j[key]` when `j` is an object holding a string there, else "" (a malformed body fails the check,
// never the test binary).
std::string string_at(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_string()) return "";
  return j.at(key).get<std::string>();
}

}  // namespace

::testing::AssertionResult is_video_refusal(const std::string& message, const std::string& source) {
  // The error names the video first, so that a request with several tells which one it was.
  const std::string want =
      source + ": this dllm was built without video support (-DDLLM_VIDEO=OFF; ";
  if (message.find(want) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "not the refusal \"" << want << "...\": " << message;
}

::testing::AssertionResult refuses_video(const CommandResult& cli, const std::string& source) {
  if (cli.status == 0)
    return ::testing::AssertionFailure() << "exit status 0 for " << source << ": " << cli.output;
  return is_video_refusal(cli.output, source);
}

::testing::AssertionResult refuses_video(int http_status, const nlohmann::json& body,
                                         const std::string& part) {
  // The client's fault, a 400 naming its content part; never a 500 or a reply without its frames.
  if (http_status != 400)
    return ::testing::AssertionFailure() << "HTTP " << http_status << ", not 400: " << body;
  const nlohmann::json& error =
      body.is_object() && body.contains("error") ? body.at("error") : body;
  if (string_at(error, "param") != part)
    return ::testing::AssertionFailure() << "the error does not name " << part << ": " << body;
  return is_video_refusal(string_at(error, "message"), part);
}

}  // namespace dllm::test
