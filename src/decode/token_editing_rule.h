// LLaDA2.1's joint update rule on one forward's sampled rows (model-specs §6.6; the LLaDA2.1
// generate() and SGLang's JointThreshold). Shared by --strategy edit (token_editing_decoder.h) and
// by S2D2 over token editing (s2d2_edit_decoder.h), whose unverified steps are exactly this rule.
// `current[r]` is the token row r holds when the forward was planned, `stats[r]` its draw.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/token_stats.h"

namespace dllm {

// M2T: the mask rows whose p > threshold; if none, the single most confident mask (the lower row
// on ties). Empty when no row is a mask.
std::vector<size_t> mask_fills(std::span<const int32_t> current, std::span<const TokenStats> stats,
                               int32_t mask_id, float threshold);

// T2T: the token rows whose draw differs from what they hold with p > editing_threshold.
std::vector<size_t> token_edits(std::span<const int32_t> current, std::span<const TokenStats> stats,
                                int32_t mask_id, float editing_threshold);

}  // namespace dllm
