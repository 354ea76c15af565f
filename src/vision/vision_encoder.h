// VisionEncoder: normalised crops -> projected features, one row of text_hidden_size per patch
// (SigLIP tower up to vision_feature_layer, then the 2-layer GELU projector), and the packed rows
// that replace an image's or a video's placeholder (feature_packing.h). The CPU encoder is the
// reference; a backend may provide a faster one with the same contract.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "vision/anyres.h"
#include "vision/image_processor.h"
#include "vision/vision_model.h"

namespace dllm {

class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  // [crops.crops, patches_per_crop, text_hidden_size], row-major.
  virtual std::vector<float> encode(const PixelCrops& crops) = 0;
  // The rows of one image (its base crop + anyres tiles, preprocess_image) or one video (one crop
  // per frame, preprocess_frames) as pack_image_features / pack_video_features lay them out;
  // newline: image_newline, [text_hidden_size]. The defaults encode, then pack on the host; an
  // encoder on a device packs there and brings back only the packed rows (for a video: 196 of
  // every frame's 729).
  virtual std::vector<float> encode_image(const PixelCrops& crops, Size2 image,
                                          std::span<const float> newline);
  virtual std::vector<float> encode_video(const PixelCrops& frames, int64_t count,
                                          std::span<const float> newline);
  // encode_video of preprocess_frames(frames): the default preprocesses every frame first; the
  // CUDA encoder preprocesses a chunk of frames while the GPU encodes the one before.
  virtual std::vector<float> encode_video_frames(std::span<const RgbImage> frames,
                                                 std::span<const float> newline);
  virtual const VisionConfig& config() const = 0;
};

// Every image's packed rows (encode_image of preprocess_image): image i + 1 is preprocessed on a
// helper thread while image i encodes.
std::vector<std::vector<float>> encode_images(VisionEncoder& encoder,
                                              std::span<const RgbImage> images,
                                              std::span<const float> newline);

// fp32 on the host, weights converted once.
std::unique_ptr<VisionEncoder> make_cpu_vision_encoder(const VisionModel& vision);
// bf16 on the current CUDA device (backend/cuda/cuda_vision_encoder.cpp), weights uploaded once;
// a CPU-only build fails with a clear error. Heads are padded with zeros to a width the
// attention kernels take (72 -> 128); min_attention_head_dim pads further (tests exercise the
// padding on a narrow tower with it).
std::unique_ptr<VisionEncoder> make_cuda_vision_encoder(const VisionModel& vision,
                                                        int min_attention_head_dim = 0);

}  // namespace dllm
