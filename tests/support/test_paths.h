// Paths the tests need: from the environment when set (a test binary carried to another
// machine or run from another directory), else those fixed at configure time.
//   DLLM_FIXTURES_DIR  tests/fixtures      DLLM_MODELS_DIR  models/ (the embedded models)
//   DLLM_BINARY        the dllm executable
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace dllm::test {

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
inline std::filesystem::path fixtures_dir() {
  return env_or("DLLM_FIXTURES_DIR", DLLM_FIXTURES_DIR);
}
inline std::filesystem::path model_fixture(const std::string& name) {
  return fixtures_dir() / "models" / name;
}
inline std::filesystem::path models_dir() {
  return env_or("DLLM_MODELS_DIR", DLLM_SOURCE_DIR "/models");
}
inline std::string dllm_binary() {
  return env_or("DLLM_BINARY", DLLM_BINARY);
}

// A fresh empty directory under the system temp dir, unique per test.
std::filesystem::path temp_dir(const std::string& tag);

// Runs a shell command, returning its exit status and combined stdout+stderr.
struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult run_command(const std::string& command);

}  // namespace dllm::test
