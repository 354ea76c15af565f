#include "engine/vision_request.h"

#include "core/error.h"
#include "vision/image_decode.h"
#include "vision/video_decode.h"

namespace dllm {

VisionSide load_vision_side(const Model& model) {
  VisionSide v;
  v.model = VisionModel::load(model);
  if (v.model) v.encoder = make_cpu_vision_encoder(*v.model);
  return v;
}

bool has_vision_inputs(const Request& r) {
  return !r.image_files.empty() || !r.video_files.empty();
}

VisionPrompt prepare_vision_prompt(const Request& r, const TextCodec& text,
                                   const VisionSide& vision) {
  if (!vision.model)
    fail(
        "images and videos need a vision-language model (sdar_v); this model has no vision "
        "tower");
  if (r.video_frames < 1 || r.video_frames > 1024)
    fail("--frames must be in 1..1024 (got ", r.video_frames, ")");
  VisionItems items;
  for (const std::string& f : r.image_files) items.images.push_back(read_image_file(f));
  for (const std::string& f : r.video_files)
    items.videos.push_back(read_video_file(f, r.video_frames).frames);
  return build_vision_prompt(text.prompt_ids(r), items, *vision.model, *vision.encoder);
}

}  // namespace dllm
