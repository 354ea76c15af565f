#include "backend/cuda/cuda_feature_packer.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/feature_packing_kernels.h"
#include "core/error.h"
#include "core/zeroed_floats.h"

namespace dllm::cuda {

CudaFeaturePacker::CudaFeaturePacker(const VisionConfig& vc, int chunk_crops, cudaStream_t stream)
    : vc_(vc), stream_(stream), th_(vc.text_hidden_size) {
  const int64_t pooled = vc_.pooled_side();
  pooled_.resize(static_cast<size_t>(chunk_crops * pooled * pooled * th_), "pooled video frames");
  newline_.resize(static_cast<size_t>(th_), "the image newline");
  for (cudaEvent_t& e : copied_)
    DLLM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

CudaFeaturePacker::~CudaFeaturePacker() {
  for (cudaEvent_t e : copied_)
    if (e) cudaEventDestroy(e);
}

void CudaFeaturePacker::start_video(int64_t frames, std::span<const float> newline) {
  if (static_cast<int64_t>(newline.size()) != th_)
    fail("encode_video: image_newline has ", newline.size(), " values, the features ", th_);
  video_ = true;
  crops_ = frames;
  added_ = 0;
  pending_.n = 0;
  newline_host_ = newline;
  const auto n = static_cast<size_t>(video_token_count(frames, vc_) * th_);
  allocate_out(n);
  staging_.ensure(n);
}

void CudaFeaturePacker::start_image(Size2 image, int64_t crops, std::span<const float> newline) {
  if (static_cast<int64_t>(newline.size()) != th_)
    fail("encode_image: image_newline has ", newline.size(), " values, the features ", th_);
  grid_ = image_feature_grid(image, vc_);
  if (crops != 1 + grid_.tiles_high * grid_.tiles_wide)
    fail("encode_image: ", crops, " crops for an image tiled into ",
         1 + grid_.tiles_high * grid_.tiles_wide);
  video_ = false;
  crops_ = crops;
  added_ = 0;
  pending_.n = 0;
  const size_t rows = static_cast<size_t>(image_token_count(image, vc_));
  allocate_out(rows * th_);
  staging_.ensure(rows * th_);
  image_out_.ensure(rows * th_, "packed image features");
  if (grid_.downscaled)
    image_grid_.ensure(static_cast<size_t>(grid_.rows * grid_.cols * th_), "an image's tile grid");
  DLLM_CUDA_CHECK(cudaMemcpyAsync(newline_.get(), newline.data(), th_ * sizeof(float),
                                  cudaMemcpyHostToDevice, stream_));
}

void CudaFeaturePacker::add_crops(int64_t first, int n, const float* features) {
  if (first != added_ || first + n > crops_)
    fail("CudaFeaturePacker: crops [", first, ", ", first + n, ") after ", added_, " of ", crops_);
  added_ += n;
  if (video_)
    add_video_frames(first, n, features);
  else
    add_image_crops(first, n, features);
}

// Each frame's side x side grid pooled to pooled x pooled rows, frames back to back.
void CudaFeaturePacker::add_video_frames(int64_t first, int n, const float* features) {
  const int side = static_cast<int>(vc_.patches_per_side()),
            p = static_cast<int>(vc_.pooled_side());
  const int64_t per_frame = static_cast<int64_t>(p) * p * th_;
  bilinear_resize(features, n, side, side, static_cast<int>(th_), pooled_.get(), p, p,
                  {per_frame, p * th_}, stream_);
  download(pooled_.get(), static_cast<size_t>(first * per_frame),
           static_cast<size_t>(n * per_frame));
}

// The base crop's rows first; the tiles' cells to their place in the grid — straight into the
// packed rows (a newline's gap after each grid row) unless the grid is shrunk in finish().
void CudaFeaturePacker::add_image_crops(int64_t first, int n, const float* features) {
  const int64_t per_crop = vc_.patches_per_crop() * th_;
  if (first == 0)
    DLLM_CUDA_CHECK(cudaMemcpyAsync(image_out_.get(), features, per_crop * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream_));
  const TileGrid g{static_cast<int>(grid_.rows),
                   static_cast<int>(grid_.cols),
                   static_cast<int>(grid_.top),
                   static_cast<int>(grid_.left),
                   static_cast<int>(vc_.patches_per_side()),
                   static_cast<int>(grid_.tiles_wide)};
  if (grid_.downscaled)
    gather_tile_grid(features, static_cast<int>(first), n, static_cast<int>(th_), g,
                     image_grid_.get(), grid_.cols * th_, stream_);
  else
    gather_tile_grid(features, static_cast<int>(first), n, static_cast<int>(th_), g,
                     image_out_.get() + per_crop, (grid_.cols + 1) * th_, stream_);
}

std::vector<float> CudaFeaturePacker::finish() {
  if (added_ != crops_) fail("CudaFeaturePacker: ", added_, " of ", crops_, " crops packed");
  if (video_) {
    download_drain();
    std::copy(newline_host_.begin(), newline_host_.end(), out().end() - th_);  // one per video
    return std::move(out());
  }
  const int64_t base = vc_.patches_per_crop() * th_, row_stride = (grid_.out_cols + 1) * th_;
  float* grid_rows = image_out_.get() + base;
  if (grid_.downscaled)
    bilinear_resize(image_grid_.get(), 1, static_cast<int>(grid_.rows),
                    static_cast<int>(grid_.cols), static_cast<int>(th_), grid_rows,
                    static_cast<int>(grid_.out_rows), static_cast<int>(grid_.out_cols),
                    {0, row_stride}, stream_);
  fill_rows(newline_.get(), static_cast<int>(th_), grid_rows + grid_.out_cols * th_,
            static_cast<int>(grid_.out_rows), row_stride, stream_);
  download(image_out_.get(), 0, out().size());
  download_drain();
  return std::move(out());
}

void CudaFeaturePacker::allocate_out(size_t n) {
  out_ = {};
  out_allocated_ = std::async(std::launch::async, zeroed_floats, n);
}

std::vector<float>& CudaFeaturePacker::out() {
  if (out_allocated_.valid()) out_ = out_allocated_.get();
  return out_;
}

void CudaFeaturePacker::download(const float* device, size_t offset, size_t n) {
  DLLM_CUDA_CHECK(cudaMemcpyAsync(staging_.get() + offset, device, n * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_));
  cudaEvent_t done = copied_[downloads_++ % 2];  // two: the pending range's stays untouched
  DLLM_CUDA_CHECK(cudaEventRecord(done, stream_));
  download_drain();  // the previous range, while the GPU runs on
  pending_ = {done, offset, n};
}

void CudaFeaturePacker::download_drain() {
  if (pending_.n == 0) return;
  DLLM_CUDA_CHECK(cudaEventSynchronize(pending_.copied));
  std::memcpy(out().data() + pending_.offset, staging_.get() + pending_.offset,
              pending_.n * sizeof(float));
  pending_.n = 0;
}

}  // namespace dllm::cuda
