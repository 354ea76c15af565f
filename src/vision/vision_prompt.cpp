#include "vision/vision_prompt.h"

#include <algorithm>

#include "core/dtype.h"
#include "core/error.h"

namespace dllm {

ExpandedPrompt expand_placeholders(std::span<const int32_t> ids,
                                   std::span<const int64_t> image_tokens,
                                   std::span<const int64_t> video_tokens, const VisionConfig& vc) {
  const auto image_id = static_cast<int32_t>(vc.image_token_id);
  const auto video_id = static_cast<int32_t>(vc.video_token_id);
  const auto n_image = std::count(ids.begin(), ids.end(), image_id);
  const auto n_video = std::count(ids.begin(), ids.end(), video_id);
  if (static_cast<size_t>(n_image) != image_tokens.size())
    fail("the prompt has ", n_image, " image placeholder(s) (<|image_pad|>, id ", image_id,
         ") for ", image_tokens.size(), " image(s); give one placeholder per image");
  if (static_cast<size_t>(n_video) != video_tokens.size())
    fail("the prompt has ", n_video, " video placeholder(s) (<|video_pad|>, id ", video_id,
         ") for ", video_tokens.size(), " video(s); give one placeholder per video");
  ExpandedPrompt out;
  size_t next_image = 0, next_video = 0;
  for (int32_t id : ids) {
    int64_t count = 1;
    Modality m = Modality::kText;
    if (id == image_id) {
      count = image_tokens[next_image++];
      m = Modality::kImage;
    } else if (id == video_id) {
      count = video_tokens[next_video++];
      m = Modality::kVideo;
    }
    out.ids.insert(out.ids.end(), static_cast<size_t>(count), id);
    out.modality.insert(out.modality.end(), static_cast<size_t>(count), m);
  }
  return out;
}

ExpandedPrompt expand_placeholders(std::span<const int32_t> ids, const VisionItems& items,
                                   const VisionConfig& vc) {
  std::vector<int64_t> image_tokens, video_tokens;
  for (const RgbImage& img : items.images)
    image_tokens.push_back(image_token_count({img.height, img.width}, vc));
  for (const auto& frames : items.videos)
    video_tokens.push_back(video_token_count(static_cast<int64_t>(frames.size()), vc));
  return expand_placeholders(ids, image_tokens, video_tokens, vc);
}

namespace {

std::vector<float> to_f32(const TensorEntry& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(*t.dtype, t.data, out.data(), out.size());
  return out;
}

}  // namespace

VisionPrompt build_vision_prompt(std::span<const int32_t> ids, const VisionItems& items,
                                 const VisionModel& vision, VisionEncoder& encoder) {
  const VisionConfig& vc = vision.config;
  const std::vector<float> newline = to_f32(*vision.tensors.image_newline);
  std::vector<std::vector<float>> image_rows, video_rows;
  std::vector<int64_t> image_tokens, video_tokens;
  image_rows = encode_images(encoder, items.images, newline);
  for (const RgbImage& img : items.images)
    image_tokens.push_back(image_token_count({img.height, img.width}, vc));
  for (const auto& frames : items.videos) {
    const auto n = static_cast<int64_t>(frames.size());
    video_rows.push_back(encoder.encode_video_frames(frames, newline));
    video_tokens.push_back(video_token_count(n, vc));
  }
  VisionPrompt out;
  out.prompt = expand_placeholders(ids, image_tokens, video_tokens, vc);
  auto emb = std::make_shared<InputEmbeddings>();
  const int64_t D = vc.text_hidden_size;
  emb->dim = D;
  emb->row_of_position.assign(out.prompt.ids.size(), -1);
  // Features of each kind in item order over that kind's placeholders (masked_scatter). The
  // first item's rows are moved, not copied (a 64-frame video's are ~200 MB).
  auto append = [&](std::vector<float>& rows) {
    if (emb->rows.empty())
      emb->rows = std::move(rows);
    else
      emb->rows.insert(emb->rows.end(), rows.begin(), rows.end());
  };
  for (auto& rows : image_rows) append(rows);
  const int64_t image_total = static_cast<int64_t>(emb->rows.size()) / D;
  for (auto& rows : video_rows) append(rows);
  int32_t next_image = 0, next_video = static_cast<int32_t>(image_total);
  for (size_t p = 0; p < out.prompt.ids.size(); ++p) {
    if (out.prompt.modality[p] == Modality::kImage) emb->row_of_position[p] = next_image++;
    if (out.prompt.modality[p] == Modality::kVideo) emb->row_of_position[p] = next_video++;
  }
  if (next_image != image_total ||
      static_cast<int64_t>(next_video) * D != static_cast<int64_t>(emb->rows.size()))
    fail("vision prompt: feature rows and placeholder tokens do not match");
  out.embeddings = std::move(emb);
  return out;
}

}  // namespace dllm
