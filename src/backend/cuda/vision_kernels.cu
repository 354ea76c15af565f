// The vision tower's kernels between its GEMMs (kernels.h): patch unfolding, LayerNorm with
// bias, bias + GELU (tanh for SigLIP's MLP, erf for the projector), periodic row adds
// (position embeddings, biases of residual outputs). fp32 math throughout; checked against the
// CPU ops (backend/cpu/cpu_vision_ops.h) in tests/cuda/cuda_vision_test.cpp.
#include <algorithm>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace dllm::cuda {

namespace {

int grid_for(int64_t total) {
  return static_cast<int>(std::clamp<int64_t>((total + 255) / 256, 1, 8192));
}

__global__ void unfold_patches_kernel(const float* pixels, int crops, int side, int patch,
                                      bf16* cols) {
  const int per_side = side / patch, patches = per_side * per_side, k = 3 * patch * patch;
  const int64_t total = static_cast<int64_t>(crops) * patches * k;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / k;
    const int col = static_cast<int>(e % k);
    const int crop = static_cast<int>(row / patches), p = static_cast<int>(row % patches);
    const int py = p / per_side, px = p % per_side;
    const int c = col / (patch * patch), ky = col / patch % patch, kx = col % patch;
    const int64_t src =
        ((static_cast<int64_t>(crop) * 3 + c) * side + py * patch + ky) * side + px * patch + kx;
    cols[e] = __float2bfloat16(pixels[src]);
  }
}

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, bf16* out,
                                  int dim, float eps) {
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  float s = 0.0f;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) s += xr[d];
  const float mean = block_sum(s) / dim;
  float ss = 0.0f;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) ss += (xr[d] - mean) * (xr[d] - mean);
  const float inv = rsqrtf(block_sum(ss) / dim + eps);
  for (int d = threadIdx.x; d < dim; d += blockDim.x)
    out[r * dim + d] = __float2bfloat16((xr[d] - mean) * inv * w[d] + b[d]);
}

__device__ __forceinline__ float activate(float v, Activation act) {
  switch (act) {
    case Activation::kGeluTanh: {
      const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);  // sqrt(2/pi)
      return 0.5f * v * (1.0f + tanhf(inner));
    }
    case Activation::kGeluErf:
      return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
    default:
      return v;
  }
}

__global__ void bias_activation_kernel(const float* in, int in_stride, const float* bias,
                                       Activation act, bf16* out, int rows, int cols) {
  const int64_t total = static_cast<int64_t>(rows) * cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols;
    const int j = static_cast<int>(e % cols);
    const float v = in[r * in_stride + j] + (bias ? bias[j] : 0.0f);
    out[e] = __float2bfloat16(activate(v, act));
  }
}

__global__ void add_rows_periodic_kernel(float* x, const float* table, int rows, int dim,
                                         int period) {
  const int64_t total = static_cast<int64_t>(rows) * dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / dim;
    x[e] += table[(r % period) * dim + e % dim];
  }
}

}  // namespace

void unfold_patches(const float* pixels, int crops, int side, int patch, bf16* cols,
                    cudaStream_t stream) {
  if (crops == 0) return;
  // As the convolution of stride `patch`: a remainder past the last whole patch is dropped (SigLIP
  // so400m: 384 = 27 x 14 + 6).
  if (patch <= 0 || side < patch)
    fail("unfold_patches: side ", side, " is smaller than the patch ", patch);
  const int64_t total = static_cast<int64_t>(crops) * (side / patch) * (side / patch) * 3 *
                        patch * patch;
  unfold_patches_kernel<<<grid_for(total), 256, 0, stream>>>(pixels, crops, side, patch, cols);
  DLLM_CUDA_LAUNCH_CHECK();
}

void layer_norm(const float* x, const float* w, const float* b, bf16* out, int rows, int dim,
                float eps, cudaStream_t stream) {
  if (rows == 0) return;
  layer_norm_kernel<<<rows, dim >= 1024 ? 1024 : 256, 0, stream>>>(x, w, b, out, dim, eps);
  DLLM_CUDA_LAUNCH_CHECK();
}

void bias_activation(const float* in, int in_stride, const float* bias, Activation act, bf16* out,
                     int rows, int cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  bias_activation_kernel<<<grid_for(static_cast<int64_t>(rows) * cols), 256, 0, stream>>>(
      in, in_stride, bias, act, out, rows, cols);
  DLLM_CUDA_LAUNCH_CHECK();
}

void add_rows_periodic(float* x, const float* table, int rows, int dim, int period,
                       cudaStream_t stream) {
  if (rows == 0 || dim == 0) return;
  add_rows_periodic_kernel<<<grid_for(static_cast<int64_t>(rows) * dim), 256, 0, stream>>>(
      x, table, rows, dim, period);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
