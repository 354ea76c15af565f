#include "backend/cuda/weight_upload.h"

#include <cstring>

#include "core/dtype.h"

namespace dllm::cuda {

namespace {

// One tensor's values as bf16 bits (a bf16 tensor is copied as it is).
std::vector<uint16_t> tensor_bf16(const TensorEntry& t) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<uint16_t> out(n);
  if (*t.dtype == DType::kBF16) {
    std::memcpy(out.data(), t.data, n * 2);
    return out;
  }
  std::vector<float> f(n);
  convert_to_f32(*t.dtype, t.data, f.data(), n);
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(f[i]);
  return out;
}

DeviceBuffer<bf16> upload_bits(const std::vector<uint16_t>& host, const char* what) {
  DeviceBuffer<bf16> d(host.size(), what);
  DLLM_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

// The parts go to their rows of the device buffer one by one: bf16 tensors straight from the
// checkpoint's (or the random model's) memory, without a concatenated host copy — at LLaDA2-mini's
// 32 GB that copy was two serial passes over host memory in the bench's set-up.
DeviceBuffer<bf16> upload_bf16(std::span<const TensorEntry* const> parts, const char* what) {
  size_t n = 0;
  for (const TensorEntry* t : parts) n += static_cast<size_t>(t->numel());
  DeviceBuffer<bf16> d(n, what);
  size_t at = 0;
  for (const TensorEntry* t : parts) {
    const size_t cnt = static_cast<size_t>(t->numel());
    if (*t->dtype == DType::kBF16) {
      DLLM_CUDA_CHECK(cudaMemcpy(d.get() + at, t->data, cnt * 2, cudaMemcpyHostToDevice));
    } else {
      const std::vector<uint16_t> bits = tensor_bf16(*t);
      DLLM_CUDA_CHECK(cudaMemcpy(d.get() + at, bits.data(), cnt * 2, cudaMemcpyHostToDevice));
    }
    at += cnt;
  }
  return d;
}

DeviceBuffer<bf16> upload_bf16(std::initializer_list<const TensorEntry*> parts, const char* what) {
  return upload_bf16(std::span<const TensorEntry* const>(parts.begin(), parts.size()), what);
}

DeviceBuffer<bf16> upload_bf16(const std::vector<float>& host, const char* what) {
  std::vector<uint16_t> bits(host.size());
  for (size_t i = 0; i < host.size(); ++i) bits[i] = f32_to_bf16(host[i]);
  return upload_bits(bits, what);
}

DeviceBuffer<float> upload_f32(const TensorEntry* t, const char* what) {
  std::vector<float> f(static_cast<size_t>(t->numel()));
  convert_to_f32(*t->dtype, t->data, f.data(), f.size());
  return upload(f, what);
}

}  // namespace dllm::cuda
