// Showing that two runs of one request which end with different ids parted at a near-tie, not at
// a bug. Each run records, after every forward, the decoder's canvas and the forward's token
// statistics (the engine's trace callback); the first forward after which the canvases differ,
// or in which the runs chose another token in some row (S2D2's drafts are state the canvas does
// not show), is where the runs parted — both fed that forward the same canvas — and the closest
// call among its decisions is measured in the reference run's own numbers. bf16 (or another
// summation order) may flip a decision only where that gap is small. A model with MoE layers
// also makes decisions inside each forward — the experts of every row — so the runs record
// those too (SequenceRequest::trace_routing), and a row routed apart must have been a near-tie
// of its router's scores.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/forward_batch.h"
#include "decode/decoder.h"
#include "decode/token_stats.h"

namespace dllm::test {

struct ForwardRecord {
  int64_t decoder_forwards = 0;   // Decoder::forwards() after it
  std::vector<int32_t> canvas;    // after the forward
  std::vector<TokenStats> stats;  // every output row of the forward's results
  std::vector<VerifyRow> verify;  // S2D2's verified rows: q(x) and p(x) of each drafted token
  // MoE models: each routed row's experts and closest routing gap, per result in order
  // (SequenceResult::routed_experts / routing_gaps, layer-major).
  std::vector<int32_t> routed_experts;
  std::vector<double> routing_gaps;
  // The forward (a prefill) started past prompt pages another request computed: the routing of
  // those rows is in no trace.
  bool reused_prefix = false;
};
using DecodeTrace = std::vector<ForwardRecord>;

// Marks a finished run whose prefill reused prompt pages another request computed
// (GenerationStats::prefix_cached_tokens > 0): with MoE layers, those rows' routing is in no
// trace (ForwardRecord::reused_prefix). A dense model's trace stays as it is.
void mark_reused_prefix(DecodeTrace& trace);

// What one forward's result shows (statistics, verified rows, routing), without a canvas: the
// record of a test that drives a decoder and a backend itself.
ForwardRecord record_of(const SequenceResult& result);

// Appends one forward's record (the engine's trace callback); a decoder that started over (the
// sequence was preempted and recomputed) starts the trace over.
void record_forward(DecodeTrace& trace, const Decoder& decoder,
                    std::span<const SequenceResult> results);

// The smallest relative gap among one forward's decisions: a token's probability against the
// runner-up, against the unmask threshold and the editing threshold (token editing), and against
// every other row's (the order of unmasking).
double closest_decision_margin(std::span<const TokenStats> stats, const DecodeParams& d);

// Largest relative gap between two runs' probabilities of a token both chose in one forward's
// rows (rows where they chose differently are skipped): how far apart their numbers were.
double stats_disagreement(std::span<const TokenStats> run, std::span<const TokenStats> reference);
// The same over S2D2's verified rows: q(x) and p(x) of the same drafted tokens.
double verify_disagreement(std::span<const VerifyRow> run, std::span<const VerifyRow> reference);

struct Parting {
  size_t forward = 0;  // the first forward after which the canvases (or chosen tokens) differ
  double margin = 0;   // closest_decision_margin of the reference's statistics there
  // Largest relative gap between the two runs' probabilities of a token both chose in that
  // forward: how far apart their numbers were where they agreed.
  double disagreement = 0;
  // MoE models: the first forward, up to `forward`, in which a row was routed to other experts,
  // and the reference's closest routing gap of the first such row (every row routed before it,
  // in that forward's layer-major order, went alike: its router saw the same inputs up to
  // rounding).
  std::optional<size_t> routing_forward;
  double routing_gap = 0;
  // Some rows' routing up to `forward` is in neither trace (a reused prompt prefix, or forwards
  // that routed different rows), so a row may have been routed apart unseen; rows routed apart
  // after those are not measured (they may follow from it).
  bool routing_unseen = false;
};

// What is measured where two runs parted in `forward`: that forward's results, and the first
// row routed apart in it or before it.
Parting parting_at(size_t forward, const DecodeTrace& run, const DecodeTrace& reference,
                   const DecodeParams& d);

// Where `run` left `reference` (nullopt: the same canvas and tokens after every forward, and as
// many forwards).
std::optional<Parting> first_parting(const DecodeTrace& run, const DecodeTrace& reference,
                                     const DecodeParams& d);

// Below this relative gap a decision may flip between two correct runs (bf16 rounding of a
// random tiny model's logits, GEMMs of other row counts, all-reduces in another order).
inline constexpr double kNearTie = 0.03;
// Above this relative gap between two runs' probabilities of the same token, the runs did not
// compute the same forward (a bug, not rounding). bf16 forwards of the random tiny fixtures move
// a logit by up to ~0.1, a probability by up to ~13 % (the largest seen: S2D2's verifier rows);
// a wrong mask, position or weight moves probabilities by factors.
inline constexpr double kSameForward = 0.2;

// gtest expectations that a parting (printed, with `what`) is a near-tie: the runs'
// probabilities where they chose alike within kSameForward (the same forward), and for greedy
// decoding the reference's closest decision margin below kNearTie. A sampled run draws the same
// uniforms in both runs, so its token may also flip where a draw falls within the runs'
// difference of a boundary of the inverse CDF, which the statistics do not show. Where a row was
// routed apart first, that routing is what must be a near-tie (its gap below kNearTie): the rows
// after it compute with other experts, so their numbers may differ beyond rounding. Where some
// routing was unseen (Parting::routing_unseen), the numbers are printed, not bounded.
void expect_near_tie(const std::string& what, const Parting& p, const DecodeParams& d);

// gtest expectations that two runs of request `what` gave the same ids, or parted at a near-tie
// (expect_near_tie). True when the ids are equal.
bool expect_same_or_near_tie(const std::string& what, const std::vector<int32_t>& run_ids,
                             const DecodeTrace& run, const std::vector<int32_t>& reference_ids,
                             const DecodeTrace& reference, const DecodeParams& d);

}  // namespace dllm::test
