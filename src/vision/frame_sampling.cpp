// Which frames of a video a vision prompt uses (video_decode.h), apart from the FFmpeg decoder so
// that builds without video support (-DDLLM_VIDEO=OFF) keep it.
#include "vision/video_decode.h"

namespace dllm {

std::vector<int64_t> uniform_frame_indices(int64_t total, int64_t wanted) {
  std::vector<int64_t> out;
  if (wanted >= total) {
    for (int64_t i = 0; i < total; ++i) out.push_back(i);
    return out;
  }
  // np.linspace(0, total - 1, wanted): start + i * step, the last one exactly total - 1.
  const double step =
      wanted > 1 ? static_cast<double>(total - 1) / static_cast<double>(wanted - 1) : 0;
  for (int64_t i = 0; i < wanted; ++i)
    out.push_back(i == wanted - 1 && wanted > 1
                      ? total - 1
                      : static_cast<int64_t>(static_cast<double>(i) * step));
  return out;
}

}  // namespace dllm
