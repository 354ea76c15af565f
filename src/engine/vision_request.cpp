#include "engine/vision_request.h"

#include "core/error.h"
#include "vision/image_decode.h"
#include "vision/video_decode.h"

namespace dllm {

VisionSide load_vision_side(const Model& model, bool on_gpu) {
  return make_vision_side(VisionModel::load(model), on_gpu);
}

VisionSide make_vision_side(std::unique_ptr<VisionModel> model, bool on_gpu) {
  VisionSide v;
  v.model = std::move(model);
  if (v.model)
    v.encoder = on_gpu ? make_cuda_vision_encoder(*v.model) : make_cpu_vision_encoder(*v.model);
  return v;
}

bool has_vision_inputs(const Request& r) {
  return !r.image_files.empty() || !r.image_bytes.empty() || !r.video_files.empty() ||
         !r.video_bytes.empty();
}

namespace {

std::span<const uint8_t> byte_span(const MediaBytes& b) {
  return {reinterpret_cast<const uint8_t*>(b.data.data()), b.data.size()};
}

std::vector<RgbImage> decode_images(const Request& r) {
  if (!r.image_files.empty() && !r.image_bytes.empty())
    fail("a request gives its images as image_files or as image_bytes, not both (got ",
         r.image_files.size(), " files and ", r.image_bytes.size(), " in memory)");
  std::vector<RgbImage> images;
  for (const std::string& f : r.image_files) images.push_back(read_image_file(f));
  for (size_t i = 0; i < r.image_bytes.size(); ++i) {
    const ImageBytes& b = r.image_bytes[i];
    const std::string name = b.name.empty() ? cat("image_bytes[", i, "]") : b.name;
    images.push_back(decode_image(byte_span(b), name));
  }
  return images;
}

std::vector<std::vector<RgbImage>> decode_videos(const Request& r) {
  if (!r.video_files.empty() && !r.video_bytes.empty())
    fail("a request gives its videos as video_files or as video_bytes, not both (got ",
         r.video_files.size(), " files and ", r.video_bytes.size(), " in memory)");
  std::vector<std::vector<RgbImage>> videos;
  for (const std::string& f : r.video_files)
    videos.push_back(read_video_file(f, r.video_frames).frames);
  for (size_t i = 0; i < r.video_bytes.size(); ++i) {
    const VideoBytes& b = r.video_bytes[i];
    const std::string name = b.name.empty() ? cat("video_bytes[", i, "]") : b.name;
    videos.push_back(decode_video(byte_span(b), name, r.video_frames).frames);
  }
  return videos;
}

}  // namespace

namespace {

// The request's images and videos, decoded; Error naming the item, or the request's fault.
VisionItems decode_items(const Request& r, const VisionSide& vision) {
  if (!vision.model)
    fail(
        "images and videos need a vision-language model (sdar_v); this model has no vision "
        "tower");
  if (r.video_frames < 1 || r.video_frames > 1024)
    fail("--frames must be in 1..1024 (got ", r.video_frames, ")");
  VisionItems items;
  items.images = decode_images(r);
  items.videos = decode_videos(r);
  return items;
}

}  // namespace

VisionPrompt prepare_vision_prompt(const Request& r, const TextCodec& text,
                                   const VisionSide& vision) {
  const VisionItems items = decode_items(r, vision);
  return build_vision_prompt(text.prompt_ids(r), items, *vision.model, *vision.encoder);
}

ExpandedPrompt expand_vision_prompt(const Request& r, const TextCodec& text,
                                    const VisionSide& vision) {
  const VisionItems items = decode_items(r, vision);
  return expand_placeholders(text.prompt_ids(r), items, vision.model->config);
}

}  // namespace dllm
