// One S2D2 verification of the first masked span C of a block (method-specs §5.2), shared by the
// S2D2 decoders: the SpanVerify request, the position-aligned verify forward (SDAR, LLaDA2.x) and
// the left-to-right acceptance of the verify forward's rows.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/forward_batch.h"
#include "decode/decoder.h"
#include "decode/rng.h"

namespace dllm {

// What the draft forward proposed for C.
struct DraftSpan {
  std::vector<int32_t> offsets;    // block offsets of C, increasing and contiguous
  std::vector<int32_t> tokens;     // the drafted token of each
  std::vector<int32_t> kept_rows;  // each one's row among the draft forward's kept output rows
};

// The backend's part of the verification (forward_batch.h): per span position the kept draft
// row, the drafted token and the residual uniform (s2d2_verify.h's keys).
SpanVerify span_verify(const DraftSpan& span, int32_t block_start, const RngKey& key);

// The position-aligned verify forward: the block's tokens up to the end of C with C draft-filled,
// then one [MASK] per position of C under verifier_mask_2l; its output rows are the [MASK] rows.
// Uses `fwd.sampler` (set first) for wants_verifier_stats.
// `block` holds the block's tokens as the verifier's first half must see them.
void plan_aligned_verify(SequenceForward& fwd, std::span<const int32_t> block, int32_t block_start,
                         const DraftSpan& span, int32_t mask_id, const RngKey& key);

// Whether a verify forward also asks for its rows' token statistics. Acceptance does not read
// them, but under greedy decoding they show how close the verifier's choice was (the margin a
// test needs to tell a bf16 near-tie from a bug: tests/support/decision_trace.h); the GPU computes
// greedy statistics of every output row anyway. Needs `fwd.sampler` set first.
bool wants_verifier_stats(const SamplerConfig& sampler);

// Accepts C's tokens left to right with probability min(1, (q/p)^γ); the first rejected position
// takes the residual draw and ends the span. Writes into `block`, counts into `stats`; returns the
// positions decided (accepted, plus the rejected one).
int32_t accept_span(std::span<const VerifyRow> rows, const DraftSpan& span, double gamma,
                    const RngKey& key, int32_t block_start, std::span<int32_t> block,
                    SpeculationStats& stats);

}  // namespace dllm
