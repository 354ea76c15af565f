// Checkpoint tensors (and host vectors) copied to the GPU once, at load: bf16 for GEMM weights
// and embeddings, fp32 for biases and norms where the kernels want them.
#pragma once

#include <initializer_list>
#include <span>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"
#include "io/safetensors.h"

namespace dllm::cuda {

template <class T>
DeviceBuffer<T> upload(const std::vector<T>& host, const char* what) {
  DeviceBuffer<T> d(host.size(), what);
  DLLM_CUDA_CHECK(
      cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Checkpoint tensors as one bf16 device buffer, concatenated along rows (converted where they
// are not bf16).
DeviceBuffer<bf16> upload_bf16(std::span<const TensorEntry* const> parts, const char* what);
DeviceBuffer<bf16> upload_bf16(std::initializer_list<const TensorEntry*> parts, const char* what);
// fp32 values rounded to bf16 (weights rearranged on the host first).
DeviceBuffer<bf16> upload_bf16(const std::vector<float>& host, const char* what);
DeviceBuffer<float> upload_f32(const TensorEntry* t, const char* what);

}  // namespace dllm::cuda
