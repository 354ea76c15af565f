// The image of an OpenAI chat content part {"type": "image_url", "image_url": {"url": ...}}, as
// encoded bytes for the engine (Request::image_bytes). The server fetches nothing from the
// network: accepted are
//   data:image/<subtype>;base64,<data>   the image inline (what OpenAI's clients send);
//   file:///absolute/path                only when the server was started with
//                                        --allowed-local-media-path DIR, and only for regular
//                                        files under DIR (symbolic links resolved first);
// http(s) and every other scheme are a 400 saying what to send instead. Decoding the image
// itself is the engine's (vision/image_decode.h); here only the container and the size limit.
#pragma once

#include <cstddef>
#include <string>

#include "dllm/engine.h"

namespace dllm::server {

struct ImageUrlPolicy {
  size_t max_image_bytes = size_t{10} << 20;  // encoded bytes of one image
  std::string allowed_local_media_path;       // canonical directory; empty: file:// refused
};

// `where` names the content part ("messages[0].content[1]"): the ApiError's param and the
// image's name in the engine's errors.
ImageBytes image_from_url(const std::string& url, const std::string& where,
                          const ImageUrlPolicy& policy);

// The canonical form of --allowed-local-media-path (an existing directory); Error otherwise.
std::string canonical_media_root(const std::string& dir);

}  // namespace dllm::server
