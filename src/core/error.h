// Errors: every failure a user can cause (bad file, bad field, bad request) is a dllm::Error whose
// message names the thing that is wrong. The CLI prints it and exits non-zero; the server (later)
// turns it into a 4xx for the one request that caused it.
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "dllm/error.h"

namespace dllm {

// Concatenates any streamable values into one string: cat("tensor ", name, " has ", n, " dims").
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <class... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

}  // namespace dllm
