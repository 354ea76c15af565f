// Video decoding for vision prompts through FFmpeg (libavformat / libavcodec / libswscale):
// `frames` frames sampled uniformly over the whole video — indices np.linspace(0, total - 1,
// frames) truncated, every frame when the video has fewer (the sampling LLaVA-OneVision's video
// examples use) — converted to 8-bit RGB. Untrusted input: dimensions are checked against the
// image limits, decode errors become an Error naming the file, nothing crashes.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "vision/image_decode.h"
#include "vision/rgb_image.h"

namespace dllm {

struct DecodedVideo {
  int64_t total_frames = 0;      // frames the video holds
  std::vector<int64_t> indices;  // the sampled frame numbers
  std::vector<RgbImage> frames;  // one per index
};

// False in a build without FFmpeg (-DDLLM_VIDEO=OFF), where read_video_file fails with an error.
bool video_decoding_available();

// Frame numbers picked from `total` frames when `wanted` are asked for.
std::vector<int64_t> uniform_frame_indices(int64_t total, int64_t wanted);

DecodedVideo read_video_file(const std::filesystem::path& path, int64_t frames,
                             const ImageLimits& limits = {});
// The same from an encoded video held in memory (a server's data: URL); `source` names it in
// errors. The container is probed from the bytes.
DecodedVideo decode_video(std::span<const uint8_t> bytes, const std::string& source, int64_t frames,
                          const ImageLimits& limits = {});

}  // namespace dllm
