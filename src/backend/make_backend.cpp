#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/tensor_parallel_backend.h"
#include "core/error.h"
#include "vision/vision_encoder.h"

namespace dllm {

#ifndef DLLM_HAVE_CUDA
// CPU-only build: the CUDA entry points exist so callers need no #ifdefs; asking for the GPU is a
// clear error.
std::unique_ptr<Backend> make_cuda_backend(const Model&, int) {
  fail("this dllm was built without CUDA (rebuild where nvcc is installed)");
}
std::unique_ptr<VisionEncoder> make_cuda_vision_encoder(const VisionModel&, int) {
  fail("this dllm was built without CUDA (rebuild where nvcc is installed)");
}
bool cuda_available() {
  return false;
}
double measure_cuda_copy_bandwidth() {
  fail("this dllm was built without CUDA");
}
double measure_cuda_gemm_rate() {
  fail("this dllm was built without CUDA");
}
double time_cuda_attention_kernel(int, int, int, int, int, int) {
  fail("this dllm was built without CUDA");
}
double time_cuda_attention_batch(int, int, int, int, int, int, int, int) {
  fail("this dllm was built without CUDA");
}
double time_cuda_sparse_prefill(const SparsePrefillPlan&, int, int, int, int) {
  fail("this dllm was built without CUDA");
}
double time_cuda_dense_prefill(int, int, int, int, int, int) {
  fail("this dllm was built without CUDA");
}
#else
double measure_cuda_copy_bandwidth();  // backend/cuda/device_info.cu
double measure_cuda_gemm_rate();
#endif

namespace {
double measure_host_copy_bandwidth() {
  std::vector<char> a(size_t(1) << 29, 1), b(a.size());
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(a.size()) / s);
  }
  return best;
}
}  // namespace

double measure_copy_bandwidth(const std::string& device) {
  if (device == "cuda") return measure_cuda_copy_bandwidth();
  if (device == "cpu") return measure_host_copy_bandwidth();
  fail("measure_copy_bandwidth: unknown device '", device, "'");
}

double measure_gemm_rate(const std::string& device) {
  if (device == "cuda") return measure_cuda_gemm_rate();
  if (device != "cpu") fail("measure_gemm_rate: unknown device '", device, "'");
  const int64_t n = 512;
  std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size());
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::matmul_nt(a.data(), n, b.data(), n, c.data(), n, n, n, n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, 2.0 * double(n * n * n) / s);
  }
  return best;
}

std::unique_ptr<Backend> make_backend(const Model& model, const std::string& device,
                                      int tensor_parallel, bool expert_parallel) {
  if (tensor_parallel != 1)
    return make_tensor_parallel_backend(
        model, device, tensor_parallel,
        expert_parallel ? MoeSplit::kExperts : MoeSplit::kExpertFeatures);
  if (device == "cpu") return make_cpu_backend(model);
  if (device == "cuda") return make_cuda_backend(model, 0);
  if (device == "auto")
    return cuda_available() ? make_cuda_backend(model, 0) : make_cpu_backend(model);
  fail("--device '", device, "' (expected auto, cpu or cuda)");
}

}  // namespace dllm
