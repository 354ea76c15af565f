// Feature packing on the device (feature_packing_kernels.h). A block per output row, its threads
// over the channels (4096 for SDAR-VL: coalesced), so the per-row index arithmetic is paid once
// per row and the copies run at memory speed.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/feature_packing_kernels.h"

namespace dllm::cuda {

namespace {

constexpr int kThreads = 256;

// One tap pair of cpu_vision_ops.cpp's linear_taps(), with the same float operations:
// __f*_rn keep nvcc from fusing a multiply and an add (the host build does not fuse them).
struct Tap {
  int i0, i1;
  float w0, w1;
};
__device__ Tap linear_tap(int in, int out, int o) {
  const float scale = __fdiv_rn(static_cast<float>(in), static_cast<float>(out));
  float src = __fsub_rn(__fmul_rn(scale, __fadd_rn(static_cast<float>(o), 0.5f)), 0.5f);
  if (src < 0) src = 0;
  const int i0 = static_cast<int>(src);
  const float l1 = fminf(fmaxf(__fsub_rn(src, static_cast<float>(i0)), 0.0f), 1.0f);
  return {i0, i0 + (i0 < in - 1 ? 1 : 0), __fsub_rn(1.0f, l1), l1};
}

__global__ void bilinear_resize_kernel(const float* in, int h, int w, int c, float* out, int oh,
                                       int ow, GridLayout L) {
  const int64_t pixel = blockIdx.x;  // (grid, y, x) of the output
  const int x = static_cast<int>(pixel % ow), y = static_cast<int>(pixel / ow % oh);
  const int64_t g = pixel / (static_cast<int64_t>(oh) * ow);
  const Tap a = linear_tap(h, oh, y), b = linear_tap(w, ow, x);
  const float* grid = in + g * h * w * c;
  const float* p00 = grid + (static_cast<int64_t>(a.i0) * w + b.i0) * c;
  const float* p01 = grid + (static_cast<int64_t>(a.i0) * w + b.i1) * c;
  const float* p10 = grid + (static_cast<int64_t>(a.i1) * w + b.i0) * c;
  const float* p11 = grid + (static_cast<int64_t>(a.i1) * w + b.i1) * c;
  float* o = out + g * L.grid_stride + y * L.row_stride + static_cast<int64_t>(x) * c;
  for (int k = threadIdx.x; k < c; k += blockDim.x) {
    // a.w0 * (b.w0 * p00 + b.w1 * p01) + a.w1 * (b.w0 * p10 + b.w1 * p11), as the host.
    const float top = __fadd_rn(__fmul_rn(b.w0, p00[k]), __fmul_rn(b.w1, p01[k]));
    const float bottom = __fadd_rn(__fmul_rn(b.w0, p10[k]), __fmul_rn(b.w1, p11[k]));
    o[k] = __fadd_rn(__fmul_rn(a.w0, top), __fmul_rn(a.w1, bottom));
  }
}

__global__ void gather_tile_grid_kernel(const float* crops, int first_crop, int n_crops, int dim,
                                        TileGrid g, float* out, int64_t row_stride) {
  const int r = blockIdx.x / g.cols, c = blockIdx.x % g.cols;
  const int R = g.top + r, C = g.left + c;
  const int crop = 1 + (R / g.side) * g.tiles_wide + C / g.side;
  if (crop < first_crop || crop >= first_crop + n_crops) return;  // another chunk's tile
  const int64_t patch = static_cast<int64_t>(R % g.side) * g.side + C % g.side;
  const float* src =
      crops + (static_cast<int64_t>(crop - first_crop) * g.side * g.side + patch) * dim;
  float* dst = out + r * row_stride + static_cast<int64_t>(c) * dim;
  for (int k = threadIdx.x; k < dim; k += blockDim.x) dst[k] = src[k];
}

__global__ void fill_rows_kernel(const float* row, int dim, float* out, int64_t row_stride) {
  float* dst = out + blockIdx.x * row_stride;
  for (int k = threadIdx.x; k < dim; k += blockDim.x) dst[k] = row[k];
}

}  // namespace

void bilinear_resize(const float* in, int grids, int h, int w, int c, float* out, int oh, int ow,
                     GridLayout out_layout, cudaStream_t stream) {
  const int64_t pixels = static_cast<int64_t>(grids) * oh * ow;
  if (pixels == 0 || c == 0) return;
  bilinear_resize_kernel<<<static_cast<unsigned>(pixels), kThreads, 0, stream>>>(
      in, h, w, c, out, oh, ow, out_layout);
  DLLM_CUDA_LAUNCH_CHECK();
}

void gather_tile_grid(const float* crops, int first_crop, int n_crops, int dim, const TileGrid& g,
                      float* out, int64_t row_stride, cudaStream_t stream) {
  if (n_crops == 0 || g.rows * g.cols == 0 || dim == 0) return;
  gather_tile_grid_kernel<<<g.rows * g.cols, kThreads, 0, stream>>>(crops, first_crop, n_crops, dim,
                                                                    g, out, row_stride);
  DLLM_CUDA_LAUNCH_CHECK();
}

void fill_rows(const float* row, int dim, float* out, int rows, int64_t row_stride,
               cudaStream_t stream) {
  if (rows == 0 || dim == 0) return;
  fill_rows_kernel<<<rows, kThreads, 0, stream>>>(row, dim, out, row_stride);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
