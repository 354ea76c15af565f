// Helpers for the hostile-input tests (issue 19): error capture and special files.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"

namespace dllm::hostile {

// The dllm::Error message `action` throws, or "(no error)". Any other exception type escapes
// and fails the test: hostile input must give a dllm::Error, never an internal one.
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Replaces `path` with a FIFO that nobody writes to: opening it for reading would block.
inline void make_fifo(const std::filesystem::path& path) {
  std::filesystem::remove(path);
  ::mkfifo(path.c_str(), 0600);
}

}  // namespace dllm::hostile
