// dllm::Error: every failure a caller can cause (a bad file, field, parameter or request). The
// message names the thing that is wrong and, where there is one, the accepted range.
#pragma once

#include <stdexcept>
#include <string>

namespace dllm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace dllm
