// Engine: drives decoders over a backend — plan, forward, observe — and owns what is common to
// every strategy: KV caches, stop ids, max_tokens, streaming of final tokens, statistics.
// The loop runs a batch of sequences per forward; `generate` is the one-request case.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "decode/decoder.h"
#include "model/model.h"

namespace dllm {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  DecodeParams params;  // resolved (resolve_decode_params)
  std::vector<int64_t>
      stop_ids;  // generation ends at the first of these (excluded from the output)
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t forwards = 0;
  // Query rows forwarded in all (the rows recomputed through all layers: the whole canvas per
  // step for full diffusion, the selected rows for d2Cache; dLLM-Cache's per-layer partial
  // refresh is not counted).
  int64_t query_rows = 0;
  double seconds = 0;
  std::vector<DecoderMetric> decoder_metrics;  // strategy-specific (Decoder::metrics)
  // Speculative decoders (S2D2): forwards = draft + verify forwards.
  bool speculative = false;
  SpeculationStats speculation;
};

struct GenerationResult {
  std::vector<int32_t> ids;   // generated ids, stop token excluded
  std::string finish_reason;  // "stop" | "length"
  GenerationStats stats;
};

// New final tokens, in order, as soon as they are known (stop token and overflow excluded).
using TokenCallback = std::function<void(std::span<const int32_t>)>;
// After every forward: the decoder's state (trajectory tests, --trace).
using TraceCallback = std::function<void(const Decoder&)>;
// Extra stop rule over the final tokens so far (stop strings): returns how many tokens to keep
// if generation must stop now, or -1 to go on.
using StopRule = std::function<int64_t(std::span<const int32_t>)>;

class Engine {
 public:
  Engine(const Model& model, Backend& backend) : model_(model), backend_(backend) {}

  GenerationResult generate(const GenerationRequest& request, const TokenCallback& on_tokens = {},
                            const TraceCallback& trace = {}, const StopRule& stop_rule = {});

 private:
  const Model& model_;
  Backend& backend_;
};

}  // namespace dllm
