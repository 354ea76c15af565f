// The feature packing of vision/feature_packing.h on the device (CudaVisionEncoder's
// encode_image / encode_video): video frames pooled bilinearly, the unpadded anyres tile grid
// gathered (and shrunk), image_newline rows placed. Checked against the host packing in
// tests/cuda/cuda_vision_test.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dllm::cuda {

// Where rows of width `dim` of a grid land, in floats: (grid g, row y, column x, channel k) at
// g * grid_stride + y * row_stride + x * dim + k. Packed rows leave a gap per grid row (the
// image_newline after it) or none (a video's frames back to back).
struct GridLayout {
  int64_t grid_stride = 0, row_stride = 0;
};

// `grids` channels-last grids in[g][h][w][c], back to back, resampled to oh x ow as
// cpu::bilinear_resize (torch's align_corners=False rule): the same operations in the same order,
// none contracted to an FMA, so the same bits as the host.
void bilinear_resize(const float* in, int grids, int h, int w, int c, float* out, int oh, int ow,
                     GridLayout out_layout, cudaStream_t stream);

// The unpadded anyres grid (FeatureGrid, vision/anyres.h) over the tiles: cell (r, c) is patch
// (top + r, left + c) of the tile grid, tiles row-major after the base crop (crop 0), each tile
// side x side patches. gather_tile_grid() copies the cells whose tile is among crops
// [first_crop, first_crop + n_crops), held in `crops` ([n_crops, side * side, dim]), to
// out + r * row_stride + c * dim — a chunk of crops at a time, as the encoder produces them.
struct TileGrid {
  int rows = 0, cols = 0, top = 0, left = 0, side = 0, tiles_wide = 0;
};
void gather_tile_grid(const float* crops, int first_crop, int n_crops, int dim, const TileGrid& g,
                      float* out, int64_t row_stride, cudaStream_t stream);

// out + r * row_stride = row[0, dim) for r < rows (the image_newline closing each grid row).
void fill_rows(const float* row, int dim, float* out, int rows, int64_t row_stride,
               cudaStream_t stream);

}  // namespace dllm::cuda
