// Paths the tests need, fixed at configure time.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace dllm::test {

inline std::filesystem::path fixtures_dir() {
  return DLLM_FIXTURES_DIR;
}
inline std::filesystem::path model_fixture(const std::string& name) {
  return fixtures_dir() / "models" / name;
}
inline std::string dllm_binary() {
  return DLLM_BINARY;
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
