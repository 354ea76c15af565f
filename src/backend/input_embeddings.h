// Input embeddings given by the request instead of looked up from token ids: the vision
// features that replace a vision-language prompt's <|image_pad|> / <|video_pad|> tokens
// (model-specs §7: masked_scatter into inputs_embeds). Keyed by logical position, so that every
// forward over those prompt positions — the prefill, a block recomputed with the first generated
// tokens, a recompute after preemption — uses them, and decoders never see them.
#pragma once

#include <cstdint>
#include <vector>

namespace dllm {

struct InputEmbeddings {
  int64_t dim = 0;  // the model's hidden size
  // row_of_position[p]: the row of `rows` holding position p's embedding, or -1 (token lookup).
  // Positions at or past its size use the token embedding.
  std::vector<int32_t> row_of_position;
  std::vector<float> rows;  // [number of given rows, dim], fp32

  // The given row for logical position p, or null.
  const float* at(int32_t p) const {
    if (p < 0 || static_cast<size_t>(p) >= row_of_position.size()) return nullptr;
    const int32_t r = row_of_position[static_cast<size_t>(p)];
    return r < 0 ? nullptr : rows.data() + static_cast<int64_t>(r) * dim;
  }
};

}  // namespace dllm
