// A request with images or videos (Request::image_files / video_files), made into what the
// engine core runs: the files decoded (vision/image_decode.h, video_decode.h), encoded by the
// vision tower, the prompt's placeholders expanded and their features attached
// (vision/vision_prompt.h). Runs on the submitting thread, before the request is queued.
#pragma once

#include <memory>

#include "dllm/engine.h"
#include "engine/text_codec.h"
#include "vision/vision_encoder.h"
#include "vision/vision_prompt.h"

namespace dllm {

struct VisionSide {
  std::unique_ptr<VisionModel> model;
  std::unique_ptr<VisionEncoder> encoder;
};

// The vision side of `model` (null members for text-only models); the encoder runs where the
// language model does (the GPU's bf16 encoder when `on_gpu`).
VisionSide load_vision_side(const Model& model, bool on_gpu);
// The same for a vision model already made (random weights, vision/random_vision.h).
VisionSide make_vision_side(std::unique_ptr<VisionModel> model, bool on_gpu);

bool has_vision_inputs(const Request& request);

// The request's prompt (ids, text or messages, as TextCodec::prompt_ids reads it) with its
// placeholders expanded and the features placed. Error naming the file or the mismatch.
VisionPrompt prepare_vision_prompt(const Request& request, const TextCodec& text,
                                   const VisionSide& vision);

// The same prompt's ids and modalities without encoding anything: the media are decoded for
// their sizes and frame counts only (Engine::prompt_token_ids).
ExpandedPrompt expand_vision_prompt(const Request& request, const TextCodec& text,
                                    const VisionSide& vision);

}  // namespace dllm
