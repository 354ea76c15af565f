// HostTensor: an owning, row-major fp32 array — the CPU backend's weights and activations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dllm {

struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;

  HostTensor() = default;
  explicit HostTensor(std::vector<int64_t> s) : shape(std::move(s)), data(count(shape), 0.0f) {}

  bool empty() const { return data.empty(); }
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  int64_t dim(size_t i) const { return shape.at(i); }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }

  static int64_t count(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
};

std::string shape_string(const std::vector<int64_t>& shape);  // "[4, 16]"

}  // namespace dllm
