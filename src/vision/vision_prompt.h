// A vision-language prompt (SDAR-VL, model-specs §7): the token ids with each <|image_pad|> /
// <|video_pad|> placeholder expanded to its item's feature count (as LlavaOnevisionProcessor
// does), the modality of every token (what MMInference's modality-aware prefill reads), and the
// features that replace the placeholders' embeddings, by position.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "backend/input_embeddings.h"
#include "vision/modality.h"
#include "vision/rgb_image.h"
#include "vision/vision_encoder.h"

namespace dllm {

struct VisionItems {
  std::vector<RgbImage> images;               // in placeholder order
  std::vector<std::vector<RgbImage>> videos;  // sampled frames of each video, in order
};

struct ExpandedPrompt {
  std::vector<int32_t> ids;
  std::vector<Modality> modality;  // per token
};

// `ids` holds exactly one image placeholder per image and one video placeholder per video;
// `image_tokens` / `video_tokens` are their feature counts. Error naming the mismatch otherwise.
ExpandedPrompt expand_placeholders(std::span<const int32_t> ids,
                                   std::span<const int64_t> image_tokens,
                                   std::span<const int64_t> video_tokens, const VisionConfig& vc);

// The same with the counts of `items` (anyres.h): the prompt as the model sees it, with no
// encoding (a server's /tokenize).
ExpandedPrompt expand_placeholders(std::span<const int32_t> ids, const VisionItems& items,
                                   const VisionConfig& vc);

struct VisionPrompt {
  ExpandedPrompt prompt;
  std::shared_ptr<const InputEmbeddings> embeddings;
};

// Preprocesses and encodes every item, expands the placeholders and places the features.
VisionPrompt build_vision_prompt(std::span<const int32_t> ids, const VisionItems& items,
                                 const VisionModel& vision, VisionEncoder& encoder);

}  // namespace dllm
