// The CUDA vision encoder's packing (VisionEncoder::encode_image / encode_video): the features
// of each chunk of crops, still on the device, are pooled (video) or gathered into the unpadded
// tile grid (image) there (feature_packing_kernels.h), and only the packed rows come back —
// through a pinned staging buffer, a video's chunk by chunk so that the host copies one chunk's
// rows out while the GPU encodes the next. Same layout and, for the pooling and the grid, the
// same bits as pack_image_features / pack_video_features over the same features.
//
// Device memory: a chunk of pooled frames and the newline, allocated at construction (before the
// engine sizes its KV pool); an image's packed rows and, when anyres_max_N shrinks it, its
// unpadded grid grow on demand to the largest image seen (the grid is at most its tiles'
// features: 36 tiles x 729 x 4096 fp32 = 430 MB for SDAR-VL's largest pinpoint).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <future>
#include <span>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "vision/anyres.h"

namespace dllm::cuda {

class CudaFeaturePacker {
 public:
  CudaFeaturePacker(const VisionConfig& vc, int chunk_crops, cudaStream_t stream);
  ~CudaFeaturePacker();
  CudaFeaturePacker(const CudaFeaturePacker&) = delete;
  CudaFeaturePacker& operator=(const CudaFeaturePacker&) = delete;

  // One video or one image: start, then every chunk of its crops in order, as the encoder leaves
  // them on the device ([n, patches_per_crop, text_hidden_size] fp32, overwritten by the next
  // chunk: work queued on the stream after this call's), then finish() for the packed rows.
  void start_video(int64_t frames, std::span<const float> newline);
  void start_image(Size2 image, int64_t crops, std::span<const float> newline);
  void add_crops(int64_t first, int n, const float* features);
  std::vector<float> finish();

 private:
  void add_video_frames(int64_t first, int n, const float* features);
  void add_image_crops(int64_t first, int n, const float* features);
  // Floats [offset, offset + n) of the result from the device, through the staging buffer; the
  // host copies the previous range out meanwhile. download_drain(): the range still pending.
  void download(const float* device, size_t offset, size_t n);
  void download_drain();
  // The result's host rows: allocated and zeroed on a helper thread from start_* on (faulting in
  // ~200 MB of fresh pages took longer than the GPU's first chunks), waited for at first use.
  void allocate_out(size_t n);
  std::vector<float>& out();

  VisionConfig vc_;
  cudaStream_t stream_ = nullptr;
  int64_t th_ = 0, crops_ = 0, added_ = 0;
  bool video_ = false;
  FeatureGrid grid_;
  std::span<const float> newline_host_;
  DeviceBuffer<float> pooled_, newline_, image_out_, image_grid_;
  PinnedBuffer<float> staging_;
  std::vector<float> out_;
  std::future<std::vector<float>> out_allocated_;
  cudaEvent_t copied_[2] = {nullptr, nullptr};
  int downloads_ = 0;
  struct Range {  // in the staging buffer, copied there when `copied` has completed
    cudaEvent_t copied = nullptr;
    size_t offset = 0, n = 0;
  } pending_;
};

}  // namespace dllm::cuda
