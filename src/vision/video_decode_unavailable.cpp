// read_video_file in a build without FFmpeg (-DDLLM_VIDEO=OFF, e.g. the GPU bundle, whose
// machine has no FFmpeg libraries and too little room to carry them): a clear error, never a
// link failure.
#include "core/error.h"
#include "vision/video_decode.h"

namespace dllm {

bool video_decoding_available() { return false; }

DecodedVideo read_video_file(const std::filesystem::path& path, int64_t, const ImageLimits&) {
  fail(path.string(), ": this dllm was built without video support (-DDLLM_VIDEO=OFF; FFmpeg's "
       "libavformat / libavcodec are needed)");
}

DecodedVideo decode_video(std::span<const uint8_t>, const std::string& source, int64_t,
                          const ImageLimits&) {
  fail(source,
       ": this dllm was built without video support (-DDLLM_VIDEO=OFF; FFmpeg's "
       "libavformat / libavcodec are needed)");
}

}  // namespace dllm
