// From a public Request to what the engine core runs: the prompt ids, the resolved decoding
// parameters and the stop ids, every field validated (one place for the CLI, the batch file, the
// server and Python — errors name the parameter, the value and the accepted range).
#pragma once

#include <cstdint>
#include <vector>

#include "decode/decoder.h"
#include "dllm/engine.h"
#include "engine/text_codec.h"

namespace dllm {

struct ResolvedRequest {
  std::vector<int32_t> prompt;
  DecodeParams params;
  std::vector<int64_t> stop_ids;
};

// `id` keys the request's random stream when it sets no seed; `on_gpu` picks WeDLM's window
// padding default (padded windows serve CUDA graph capture).
ResolvedRequest resolve_request(const Request& request, const Model& model, const TextCodec& text,
                                uint64_t id, bool on_gpu);

}  // namespace dllm
