#include "backend/cuda/cuda_kv_cache.h"

namespace dllm::cuda {

CudaKvCache::CudaKvCache(int64_t num_layers, int64_t kv_dim, int64_t capacity, cudaStream_t stream)
    : layers_(num_layers), kv_dim_(kv_dim), stream_(stream) {
  reserve(capacity);
}

void CudaKvCache::grow_storage(int64_t new_capacity) {
  DeviceBuffer<bf16> k(static_cast<size_t>(layers_ * new_capacity * kv_dim_), "the KV cache (K)");
  DeviceBuffer<bf16> v(static_cast<size_t>(layers_ * new_capacity * kv_dim_), "the KV cache (V)");
  DeviceBuffer<int32_t> pos(static_cast<size_t>(new_capacity), "the KV cache positions");
  if (cap_ > 0) {
    const size_t row = static_cast<size_t>(kv_dim_) * sizeof(bf16);
    // Each layer's old slots move to the start of its new, larger region.
    DLLM_CUDA_CHECK(cudaMemcpy2DAsync(k.get(), new_capacity * row, k_.get(), cap_ * row, cap_ * row,
                                      layers_, cudaMemcpyDeviceToDevice, stream_));
    DLLM_CUDA_CHECK(cudaMemcpy2DAsync(v.get(), new_capacity * row, v_.get(), cap_ * row, cap_ * row,
                                      layers_, cudaMemcpyDeviceToDevice, stream_));
    DLLM_CUDA_CHECK(cudaMemcpyAsync(pos.get(), pos_.get(), cap_ * sizeof(int32_t),
                                    cudaMemcpyDeviceToDevice, stream_));
    DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old buffers are freed next
  }
  k_ = std::move(k);
  v_ = std::move(v);
  pos_ = std::move(pos);
  cap_ = new_capacity;
}

}  // namespace dllm::cuda
