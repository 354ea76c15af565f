// Running sets of requests through an EngineCore for the engine tests (CPU here, CUDA in
// tests/cuda): each request alone, or all of them together with staggered arrivals, and the
// results by request.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "support/decision_trace.h"

namespace dllm::test {

struct EngineCase {
  std::vector<int32_t> prompt;
  DecodeParams params;   // resolved
  int arrival_step = 0;  // when it joins a batched run
};

struct EngineOutcome {
  std::vector<int32_t> ids;
  std::string finish_reason, error;
  int64_t preemptions = 0, prefix_cached_tokens = 0;
  int finishes = 0;   // how often on_finish ran (must be once)
  DecodeTrace trace;  // every forward's canvas and statistics (expect_same_or_near_tie)
};

// Requests for `model`: `n` of them cycling through `strategies` (greedy, every third one sampled
// with a seed), prompts of different lengths from the held-out arithmetic set (or random ids),
// max_tokens 6..20, arrivals spread over the first `spread` steps. "block+mage" (quest, sparsed)
// is --strategy block with that sparse attention at k = 8.
std::vector<EngineCase> mixed_cases(const Model& model, const std::vector<std::string>& strategies,
                                    int n, int spread);

// Requests for the llada2-tiny fixture (ids below 290): block diffusion and token editing, exact
// and with MAGE, S2D2 over both — greedy, sampled, the HF-2.0 sampling quirk, S and Q modes,
// blocks of 32 and 8 — with staggered arrivals.
std::vector<EngineCase> llada2_cases(const Model& model);

// Every case in its own fresh EngineCore over `backend`.
std::vector<EngineOutcome> run_alone(const Model& model, Backend& backend,
                                     const std::vector<EngineCase>& cases);
// All cases in one EngineCore, each added at its arrival step.
std::vector<EngineOutcome> run_together(EngineCore& core, const std::vector<EngineCase>& cases);

}  // namespace dllm::test
