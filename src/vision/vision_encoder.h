// VisionEncoder: normalised crops -> projected features, one row of text_hidden_size per patch
// (SigLIP tower up to vision_feature_layer, then the 2-layer GELU projector). The CPU encoder is
// the reference; a backend may provide a faster one with the same contract.
#pragma once

#include <memory>
#include <vector>

#include "vision/image_processor.h"
#include "vision/vision_model.h"

namespace dllm {

class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  // [crops.crops, patches_per_crop, text_hidden_size], row-major.
  virtual std::vector<float> encode(const PixelCrops& crops) = 0;
};

// fp32 on the host, weights converted once.
std::unique_ptr<VisionEncoder> make_cpu_vision_encoder(const VisionModel& vision);
// bf16 on the current CUDA device (backend/cuda/cuda_vision_encoder.cpp), weights uploaded once;
// a CPU-only build fails with a clear error. Heads are padded with zeros to a width the
// attention kernels take (72 -> 128); min_attention_head_dim pads further (tests exercise the
// padding on a narrow tower with it).
std::unique_ptr<VisionEncoder> make_cuda_vision_encoder(const VisionModel& vision,
                                                       int min_attention_head_dim = 0);

}  // namespace dllm
