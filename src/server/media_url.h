// The image or video of an OpenAI-style chat content part — {"type": "image_url", "image_url":
// {"url": ...}} or vLLM's {"type": "video_url", "video_url": {"url": ...}} — as encoded bytes for
// the engine (Request::image_bytes / video_bytes). The server fetches nothing from the network:
// accepted are
//   data:image/<subtype>;base64,<data>   an image inline (what OpenAI's clients send);
//   data:video/<subtype>;base64,<data>   a video inline (video/mp4, video/webm, ...);
//   file:///absolute/path                only when the server was started with
//                                        --allowed-local-media-path DIR, and only for regular
//                                        files under DIR (symbolic links resolved first);
// http(s) and every other scheme are a 400 saying what to send instead. Decoding the media
// itself is the engine's (vision/image_decode.h, video_decode.h); here only the container and the
// size limits.
#pragma once

#include <cstddef>
#include <string>

#include "dllm/engine.h"

namespace dllm::server {

enum class MediaKind { image, video };

struct MediaUrlPolicy {
  size_t max_image_bytes = size_t{10} << 20;  // encoded bytes of one image
  size_t max_video_bytes = size_t{64} << 20;  // encoded bytes of one video
  std::string allowed_local_media_path;       // canonical directory; empty: file:// refused
};

// `where` names the content part ("messages[0].content[1]"): the ApiError's param and the
// item's name in the engine's errors.
MediaBytes media_from_url(MediaKind kind, const std::string& url, const std::string& where,
                          const MediaUrlPolicy& policy);

// The canonical form of --allowed-local-media-path (an existing directory); Error otherwise.
std::string canonical_media_root(const std::string& dir);

}  // namespace dllm::server
