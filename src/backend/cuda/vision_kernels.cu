// The vision tower's kernels between its GEMMs (kernels.h): patch unfolding, LayerNorm with
// bias, bias + GELU (tanh for SigLIP's MLP, erf for the projector), periodic row adds
// (position embeddings, biases of residual outputs). fp32 math throughout; checked against the
// CPU ops (backend/cpu/cpu_vision_ops.h) in tests/cuda/cuda_vision_test.cpp.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace dllm::cuda {

namespace {

int grid_for(int64_t total) {
  return static_cast<int>(std::clamp<int64_t>((total + 255) / 256, 1, 8192));
}

// Four values to out[0..3] as bf16 in one 8-byte store (out 8-byte aligned).
__device__ __forceinline__ void store_bf16x4(bf16* out, float a, float b, float c, float d) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
  uint2 packed;
  packed.x = reinterpret_cast<uint32_t&>(lo);
  packed.y = reinterpret_cast<uint32_t&>(hi);
  *reinterpret_cast<uint2*>(out) = packed;
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

// One block a row: any width.
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

// A warp a row of width dim = 4 * n4 (n4 <= 32 * kLayerNormVecs), the row in registers: one read
// of x, 16-byte loads. The tower's 1152-wide rows in 1024-thread blocks (the kernel above) ran at
// ~0.6 TB/s.
constexpr int kLayerNormVecs = 16;

__global__ void layer_norm_warp_kernel(const float* x, const float* w, const float* b, bf16* out,
                                       int rows, int dim, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int n4 = dim / 4;
  const float4* xr = reinterpret_cast<const float4*>(x + r * dim);
  float4 v[kLayerNormVecs];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kLayerNormVecs; ++i) {
    const int c = lane + 32 * i;
    v[i] = c < n4 ? xr[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
  }
  const float mean = warp_sum(s) / dim;
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kLayerNormVecs; ++i)
    if (lane + 32 * i < n4) {
      const float a = v[i].x - mean, bb = v[i].y - mean, c = v[i].z - mean, d = v[i].w - mean;
      ss += (a * a + bb * bb) + (c * c + d * d);
    }
  const float inv = rsqrtf(warp_sum(ss) / dim + eps);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const float4* b4 = reinterpret_cast<const float4*>(b);
#pragma unroll
  for (int i = 0; i < kLayerNormVecs; ++i) {
    const int c = lane + 32 * i;
    if (c >= n4) continue;
    const float4 g = w4[c], o = b4[c];
    store_bf16x4(out + r * dim + 4 * c, (v[i].x - mean) * inv * g.x + o.x,
                 (v[i].y - mean) * inv * g.y + o.y, (v[i].z - mean) * inv * g.z + o.z,
                 (v[i].w - mean) * inv * g.w + o.w);
  }
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

// Output column of input column j: column groups of `group` values (heads of head_dim) land
// `group_stride` apart (padded heads); group = group_stride = cols for a plain row.
__device__ __forceinline__ int64_t spread_column(int j, int group, int group_stride) {
  return static_cast<int64_t>(j / group) * group_stride + j % group;
}

// The two kernels below walk rows [first_row, first_row + rows) x `vecs` vectors of VEC columns
// as one flat range, a 32-bit index (the launchers keep rows x vecs < 2^31) split into row and
// vector by one 32-bit division: no 64-bit division per element, and no idle threads past a
// row's end (a block a row left 44 % of them idle on 1152-wide rows).
struct FlatRows {
  int64_t first_row;
  unsigned rows, vecs;
};

// out[r, spread(j)] = bf16(act(in[r, j] + bias[j])), VEC consecutive columns a thread (VEC = 4:
// cols, in_stride, group and group_stride multiples of 4, so a vector never straddles a group).
template <int VEC>
__global__ void bias_activation_kernel(FlatRows f, const float* in, int in_stride,
                                       const float* bias, Activation act, bf16* out, int out_stride,
                                       int group, int group_stride) {
  const unsigned total = f.rows * f.vecs;
  for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const unsigned rr = e / f.vecs;
    const int64_t r = f.first_row + rr;
    const int j = static_cast<int>(e - rr * f.vecs) * VEC;
    const float* src = in + r * in_stride + j;
    bf16* dst = out + r * out_stride + spread_column(j, group, group_stride);
    if constexpr (VEC == 4) {
      float4 v = *reinterpret_cast<const float4*>(src);
      if (bias) {
        const float4 bv = *reinterpret_cast<const float4*>(bias + j);
        v.x += bv.x, v.y += bv.y, v.z += bv.z, v.w += bv.w;
      }
      store_bf16x4(dst, activate(v.x, act), activate(v.y, act), activate(v.z, act),
                   activate(v.w, act));
    } else {
      *dst = __float2bfloat16(activate(*src + (bias ? bias[j] : 0.0f), act));
    }
  }
}

// x[r, :] += table[r % period, :], VEC columns a thread as above.
template <int VEC>
__global__ void add_rows_periodic_kernel(FlatRows f, float* x, const float* table, int dim,
                                         int period) {
  const unsigned total = f.rows * f.vecs;
  for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const unsigned rr = e / f.vecs;
    const int64_t r = f.first_row + rr;
    const int64_t j = static_cast<int64_t>(e - rr * f.vecs) * VEC;
    float* xp = x + r * dim + j;
    const float* tp = table + (r % period) * dim + j;
    if constexpr (VEC == 4) {
      float4 v = *reinterpret_cast<float4*>(xp);
      const float4 t = *reinterpret_cast<const float4*>(tp);
      v.x += t.x, v.y += t.y, v.z += t.z, v.w += t.w;
      *reinterpret_cast<float4*>(xp) = v;
    } else {
      *xp += *tp;
    }
  }
}

// Launches `kernel` over rows x vecs as flat ranges of < 2^31 vectors, 256-thread blocks, at most
// kMaxBlocks of them (each thread then walks several vectors).
template <class Kernel, class... Args>
void launch_flat_rows(Kernel kernel, int rows, int vecs, cudaStream_t stream, Args... args) {
  constexpr int64_t kMaxBlocks = 4096;
  const int64_t rows_per_launch = std::max<int64_t>(1, (int64_t{1} << 31) / std::max(vecs, 1) - 1);
  for (int64_t r0 = 0; r0 < rows; r0 += rows_per_launch) {
    const int64_t n = std::min<int64_t>(rows_per_launch, rows - r0);
    const int64_t blocks = std::clamp<int64_t>((n * vecs + 255) / 256, 1, kMaxBlocks);
    const FlatRows f{r0, static_cast<unsigned>(n), static_cast<unsigned>(vecs)};
    kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(f, args...);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void unfold_patches(const float* pixels, int crops, int side, int patch, bf16* cols,
                    cudaStream_t stream) {
  if (crops == 0) return;
  // As the convolution of stride `patch`: a remainder past the last whole patch is dropped (SigLIP
  // so400m: 384 = 27 x 14 + 6).
  if (patch <= 0 || side < patch)
    fail("unfold_patches: side ", side, " is smaller than the patch ", patch);
  const int64_t total =
      static_cast<int64_t>(crops) * (side / patch) * (side / patch) * 3 * patch * patch;
  unfold_patches_kernel<<<grid_for(total), 256, 0, stream>>>(pixels, crops, side, patch, cols);
  DLLM_CUDA_LAUNCH_CHECK();
}

void layer_norm(const float* x, const float* w, const float* b, bf16* out, int rows, int dim,
                float eps, cudaStream_t stream) {
  if (rows == 0) return;
  if (dim % 4 == 0 && dim <= 4 * 32 * kLayerNormVecs && aligned16(x) && aligned16(w) &&
      aligned16(b) && reinterpret_cast<uintptr_t>(out) % 8 == 0) {
    constexpr int kRowsPerBlock = 8;
    layer_norm_warp_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, 32 * kRowsPerBlock, 0,
                             stream>>>(x, w, b, out, rows, dim, eps);
  } else {
    layer_norm_kernel<<<rows, dim >= 1024 ? 1024 : 256, 0, stream>>>(x, w, b, out, dim, eps);
  }
  DLLM_CUDA_LAUNCH_CHECK();
}

namespace {

void launch_bias_activation(const float* in, int in_stride, const float* bias, Activation act,
                            bf16* out, int out_stride, int rows, int cols, int group,
                            int group_stride, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const bool vec4 = cols % 4 == 0 && in_stride % 4 == 0 && out_stride % 4 == 0 && group % 4 == 0 &&
                    group_stride % 4 == 0 && aligned16(in) &&
                    (bias == nullptr || aligned16(bias)) &&
                    reinterpret_cast<uintptr_t>(out) % 8 == 0;
  if (vec4)
    launch_flat_rows(bias_activation_kernel<4>, rows, cols / 4, stream, in, in_stride, bias, act,
                     out, out_stride, group, group_stride);
  else
    launch_flat_rows(bias_activation_kernel<1>, rows, cols, stream, in, in_stride, bias, act, out,
                     out_stride, group, group_stride);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace

void bias_activation(const float* in, int in_stride, const float* bias, Activation act, bf16* out,
                     int rows, int cols, cudaStream_t stream) {
  launch_bias_activation(in, in_stride, bias, act, out, cols, rows, cols, cols, cols, stream);
}

void bias_to_padded_heads(const float* in, int in_stride, const float* bias, bf16* out, int rows,
                          int heads, int head_dim, int padded, cudaStream_t stream) {
  if (padded < head_dim)
    fail("bias_to_padded_heads: padded width ", padded, " < head_dim ", head_dim);
  launch_bias_activation(in, in_stride, bias, Activation::kNone, out, heads * padded, rows,
                         heads * head_dim, head_dim, padded, stream);
}

void add_rows_periodic(float* x, const float* table, int rows, int dim, int period,
                       cudaStream_t stream) {
  if (rows == 0 || dim == 0) return;
  if (dim % 4 == 0 && aligned16(x) && aligned16(table))
    launch_flat_rows(add_rows_periodic_kernel<4>, rows, dim / 4, stream, x, table, dim, period);
  else
    launch_flat_rows(add_rows_periodic_kernel<1>, rows, dim, stream, x, table, dim, period);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
