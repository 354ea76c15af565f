// S2D2 that never verifies (a span minimum above any block) beside the strategy it drafts with:
// the same request decoded both ways, with the canvas after every forward of each. The S2D2 tests
// check that the two are the same decoding.
#pragma once

#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace dllm::test {

struct UnverifiedS2d2Pair {
  GenerationResult plain, s2d2;
  std::vector<std::vector<int32_t>> plain_canvases, s2d2_canvases;
};

inline UnverifiedS2d2Pair decode_plain_and_unverified_s2d2(EngineCore& engine, const Model& model,
                                                           const std::vector<int32_t>& prompt,
                                                           const DecodeParams& params,
                                                           const std::string& plain_strategy) {
  UnverifiedS2d2Pair out;
  GenerationRequest req;
  req.prompt = prompt;
  for (const bool s2d2 : {false, true}) {
    DecodeParams p = params;
    p.strategy = s2d2 ? "s2d2" : plain_strategy;
    if (s2d2) p.s2d2.span_min = 1000;
    req.params = resolve_decode_params(model.config(), p, static_cast<int64_t>(prompt.size()));
    auto& canvases = s2d2 ? out.s2d2_canvases : out.plain_canvases;
    (s2d2 ? out.s2d2 : out.plain) = engine.generate(
        req, {}, [&](const Decoder& dec, auto) { canvases.push_back(dec.canvas()); });
  }
  return out;
}

}  // namespace dllm::test
