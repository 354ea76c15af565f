// Helpers for GPU tests: random inputs, host<->device copies, relative errors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"

namespace dllm::test {

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Rounds to bf16 in place and returns the bf16 bits.
inline std::vector<uint16_t> round_bf16(std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = f32_to_bf16(v[i]);
    v[i] = bf16_to_f32(bits[i]);
  }
  return bits;
}

template <class T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& h) {
  cuda::DeviceBuffer<T> d(h.size(), "test input");
  DLLM_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  DLLM_CUDA_CHECK(cudaDeviceSynchronize());
  DLLM_CUDA_CHECK(cudaMemcpy(h.data(), d.get(), h.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

inline std::vector<float> bf16_to_floats(const std::vector<cuda::bf16>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = __bfloat162float(v[i]);
  return f;
}

inline double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace dllm::test
