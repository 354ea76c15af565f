// Device measurements and benchmark helpers: copy bandwidth, random K/V fill.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"

namespace dllm {

double measure_cuda_copy_bandwidth() {
  const size_t bytes = size_t(1) << 30;
  cuda::DeviceBuffer<char> a(bytes, "the bandwidth probe"), b(bytes, "the bandwidth probe");
  DLLM_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  cudaEvent_t start, stop;
  DLLM_CUDA_CHECK(cudaEventCreate(&start));
  DLLM_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {
    DLLM_CUDA_CHECK(cudaEventRecord(start));
    DLLM_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
    DLLM_CUDA_CHECK(cudaEventRecord(stop));
    DLLM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    DLLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) best_ms = std::min(best_ms, ms);  // the first copy warms up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * double(bytes) / (best_ms * 1e-3);
}

double measure_cuda_gemm_rate() {
  const int n = 8192;
  cuda::DeviceBuffer<cuda::bf16> a(size_t(n) * n, "the GEMM probe"), b(size_t(n) * n, "the GEMM probe");
  cuda::DeviceBuffer<cuda::bf16> c(size_t(n) * n, "the GEMM probe");
  cuda::fill_random_bf16(a.get(), int64_t(n) * n, 1, nullptr);
  cuda::fill_random_bf16(b.get(), int64_t(n) * n, 2, nullptr);
  cublasHandle_t handle = nullptr;
  DLLM_CUBLAS_CHECK(cublasCreate(&handle));
  cudaEvent_t start, stop;
  DLLM_CUDA_CHECK(cudaEventCreate(&start));
  DLLM_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {
    DLLM_CUDA_CHECK(cudaEventRecord(start));
    cuda::gemm_nt(handle, a.get(), b.get(), c.get(), CUDA_R_16BF, n, n, n, false);
    DLLM_CUDA_CHECK(cudaEventRecord(stop));
    DLLM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    DLLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) best_ms = std::min(best_ms, ms);  // the first call warms up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasDestroy(handle);
  return 2.0 * double(n) * n * n / (best_ms * 1e-3);
}

namespace cuda {

namespace {
__global__ void fill_random_kernel(bf16* data, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t x = seed ^ (static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    data[i] = __float2bfloat16(static_cast<float>(static_cast<int32_t>(x >> 32)) / 2147483648.0f);
  }
}
__global__ void iota_kernel(int32_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<int32_t>(i);
}
}  // namespace

void fill_random_bf16(bf16* data, int64_t n, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return;
  fill_random_kernel<<<4096, 256, 0, stream>>>(data, n, seed);
  DLLM_CUDA_LAUNCH_CHECK();
}

void fill_iota(int32_t* p, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  iota_kernel<<<1024, 256, 0, stream>>>(p, n);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace dllm
