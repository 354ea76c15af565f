// Relative L2 error ||a - b|| / ||b|| of a result against its reference, in double.
#pragma once

#include <cmath>
#include <span>

namespace dllm::test {

inline double rel_error(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace dllm::test
