#include "backend/cuda/weight_upload.h"

#include <cstring>

#include "core/dtype.h"

namespace dllm::cuda {

std::vector<uint16_t> to_bf16(std::span<const TensorEntry* const> parts) {
  size_t n = 0;
  for (const TensorEntry* t : parts) n += static_cast<size_t>(t->numel());
  std::vector<uint16_t> out(n);
  size_t at = 0;
  for (const TensorEntry* t : parts) {
    const size_t cnt = static_cast<size_t>(t->numel());
    if (*t->dtype == DType::kBF16) {
      std::memcpy(&out[at], t->data, cnt * 2);
    } else {
      std::vector<float> f(cnt);
      convert_to_f32(*t->dtype, t->data, f.data(), cnt);
      for (size_t i = 0; i < cnt; ++i) out[at + i] = f32_to_bf16(f[i]);
    }
    at += cnt;
  }
  return out;
}

namespace {

DeviceBuffer<bf16> upload_bits(const std::vector<uint16_t>& host, const char* what) {
  DeviceBuffer<bf16> d(host.size(), what);
  DLLM_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

DeviceBuffer<bf16> upload_bf16(std::span<const TensorEntry* const> parts, const char* what) {
  return upload_bits(to_bf16(parts), what);
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
