// What the engine core takes and gives per request at the token level (the text layer and the
// public API in include/dllm/ wrap it): a prompt of ids with resolved decoding parameters in,
// final token ids, a finish reason and statistics out.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "decode/decoder.h"

namespace dllm {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  DecodeParams params;  // resolved (resolve_decode_params)
  // Generation ends at the first of these (excluded from the output).
  std::vector<int64_t> stop_ids;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t forwards = 0;
  // Query rows forwarded in all (the rows recomputed through all layers: the whole canvas per
  // step for full diffusion, the selected rows for d2Cache; dLLM-Cache's per-layer partial
  // refresh is not counted).
  int64_t query_rows = 0;
  int64_t prefix_cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
  int64_t preemptions = 0;           // times the sequence was preempted and recomputed
  double seconds = 0;                // arrival to finish
  double queue_seconds = 0;          // arrival to first admission
  double first_token_seconds = -1;   // arrival to the first streamed token (-1: none)
  std::vector<DecoderMetric> decoder_metrics;  // strategy-specific (Decoder::metrics)
  // Speculative decoders (S2D2): forwards = draft + verify forwards.
  bool speculative = false;
  SpeculationStats speculation;
};

struct GenerationResult {
  std::vector<int32_t> ids;   // generated ids, stop token excluded
  std::string finish_reason;  // "stop" | "length" | "cancelled" | "error"
  std::string error;          // finish_reason "error": what went wrong
  GenerationStats stats;
};

// New final tokens, in order, as soon as they are known (stop token and overflow excluded).
using TokenCallback = std::function<void(std::span<const int32_t>)>;
// After every forward: the decoder's state and the forward's results (trajectory tests, --trace,
// and tests that show where two runs of a request parted).
using TraceCallback = std::function<void(const Decoder&, std::span<const SequenceResult>)>;
// Extra stop rule over the final tokens so far (stop strings): returns how many tokens to keep
// if generation must stop now, or -1 to go on.
using StopRule = std::function<int64_t(std::span<const int32_t>)>;
using FinishCallback = std::function<void(GenerationResult&&)>;

}  // namespace dllm
