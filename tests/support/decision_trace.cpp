#include "support/decision_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dllm::test {

namespace {

// Appends what one result shows to a forward's record.
void append(ForwardRecord& r, const SequenceResult& s) {
  r.stats.insert(r.stats.end(), s.stats.begin(), s.stats.end());
  r.verify.insert(r.verify.end(), s.verify_rows.begin(), s.verify_rows.end());
  r.routed_experts.insert(r.routed_experts.end(), s.routed_experts.begin(), s.routed_experts.end());
  r.routing_gaps.insert(r.routing_gaps.end(), s.routing_gaps.begin(), s.routing_gaps.end());
}

}  // namespace

void record_forward(DecodeTrace& trace, const Decoder& decoder,
                    std::span<const SequenceResult> results) {
  if (!trace.empty() && decoder.forwards() <= trace.back().decoder_forwards) trace.clear();
  ForwardRecord& r = trace.emplace_back();
  r.decoder_forwards = decoder.forwards();
  r.canvas = decoder.canvas();
  for (const SequenceResult& s : results) append(r, s);
}

void mark_reused_prefix(DecodeTrace& trace) {
  const bool routed = std::any_of(trace.begin(), trace.end(),
                                  [](const ForwardRecord& r) { return !r.routing_gaps.empty(); });
  if (routed) trace.front().reused_prefix = true;
}

ForwardRecord record_of(const SequenceResult& result) {
  ForwardRecord r;
  append(r, result);
  return r;
}

double closest_decision_margin(std::span<const TokenStats> stats, const DecodeParams& d) {
  double margin = 1e9;
  for (size_t i = 0; i < stats.size(); ++i) {
    const double ci = std::max(double(stats[i].p_token_tempered), 1e-9);
    margin = std::min(margin, double(stats[i].margin) / ci);
    margin = std::min(margin, std::abs(ci - d.threshold) / ci);
    if (d.editing_threshold >= 0)
      margin = std::min(margin, std::abs(ci - d.editing_threshold) / ci);
    for (size_t j = i + 1; j < stats.size(); ++j)
      margin = std::min(margin, std::abs(ci - stats[j].p_token_tempered) / ci);
  }
  return margin;
}

namespace {

// Whether two runs chose the same token in every output row of a forward: S2D2's drafts are
// state the canvas does not show (the next forward verifies them).
bool same_tokens(std::span<const TokenStats> run, std::span<const TokenStats> reference) {
  if (run.size() != reference.size()) return false;
  for (size_t i = 0; i < run.size(); ++i)
    if (run[i].token != reference[i].token) return false;
  return true;
}

double relative_gap(double run, double reference) {
  return std::abs(run - reference) / std::max(std::abs(reference), 1e-9);
}

// How two records of one forward routed: alike, apart from a row on (its layer-major index), or
// not comparably (different rows routed, or rows routed in no trace).
struct RoutingComparison {
  bool comparable = true;
  std::optional<size_t> apart;
};
RoutingComparison compare_routing(const ForwardRecord& run, const ForwardRecord& reference) {
  const size_t rows = reference.routing_gaps.size();
  if (run.reused_prefix || reference.reused_prefix || run.routing_gaps.size() != rows ||
      run.routed_experts.size() != reference.routed_experts.size())
    return {false, std::nullopt};
  if (rows == 0) return {};
  const size_t k = reference.routed_experts.size() / rows;
  for (size_t t = 0; t < rows; ++t)
    if (!std::equal(run.routed_experts.begin() + t * k, run.routed_experts.begin() + (t + 1) * k,
                    reference.routed_experts.begin() + t * k))
      return {true, t};
  return {};
}

}  // namespace

double stats_disagreement(std::span<const TokenStats> run, std::span<const TokenStats> reference) {
  double worst = 0;
  for (size_t i = 0; i < std::min(run.size(), reference.size()); ++i)
    if (run[i].token == reference[i].token)
      worst = std::max(worst, relative_gap(run[i].p_token_tempered, reference[i].p_token_tempered));
  return worst;
}

double verify_disagreement(std::span<const VerifyRow> run, std::span<const VerifyRow> reference) {
  double worst = 0;
  for (size_t i = 0; i < std::min(run.size(), reference.size()); ++i)
    worst = std::max({worst, relative_gap(run[i].q_token, reference[i].q_token),
                      relative_gap(run[i].p_token, reference[i].p_token)});
  return worst;
}

std::optional<Parting> first_parting(const DecodeTrace& run, const DecodeTrace& reference,
                                     const DecodeParams& d) {
  const size_t n = std::min(run.size(), reference.size());
  if (n == 0) {  // a run without a forward: nothing shows where it parted
    if (run.size() == reference.size()) return std::nullopt;
    return Parting{0, 1e9, 1e9};
  }
  size_t f = 0;
  while (f < n && run[f].canvas == reference[f].canvas &&
         same_tokens(run[f].stats, reference[f].stats))
    ++f;
  if (f == n && run.size() == reference.size()) return std::nullopt;
  // A run that stopped early with equal canvases parted in its last forward's decisions
  // (a stop id unmasked in one run only).
  if (f == n) f = n - 1;
  return parting_at(f, run, reference, d);
}

Parting parting_at(size_t forward, const DecodeTrace& run, const DecodeTrace& reference,
                   const DecodeParams& d) {
  Parting p;
  p.forward = forward;
  p.margin = closest_decision_margin(reference[forward].stats, d);
  p.disagreement = std::max(stats_disagreement(run[forward].stats, reference[forward].stats),
                            verify_disagreement(run[forward].verify, reference[forward].verify));
  for (size_t g = 0; g <= forward; ++g) {
    const RoutingComparison c = compare_routing(run[g], reference[g]);
    if (!c.comparable) {  // a later row routed apart may follow from rows no trace shows
      p.routing_unseen = true;
      break;
    }
    if (c.apart) {
      p.routing_forward = g;
      p.routing_gap = reference[g].routing_gaps[*c.apart];
      break;
    }
  }
  return p;
}

void expect_near_tie(const std::string& what, const Parting& p, const DecodeParams& d) {
  const bool sampled = d.sampler.temperature > 0;
  std::printf(
      "  %s: parted at forward %zu; closest reference decision margin %.4f, probabilities where "
      "alike %.2e%s\n",
      what.c_str(), p.forward, p.margin, p.disagreement, sampled ? " (sampled)" : "");
  if (p.routing_forward) {
    std::printf(
        "    a row was routed to other experts first, in forward %zu: its routing gap %.4f\n",
        *p.routing_forward, p.routing_gap);
    EXPECT_LT(p.routing_gap, kNearTie)
        << what << ": a row routed apart without a near-tie is a bug";
    return;
  }
  if (p.routing_unseen)
    std::printf("    (some rows' MoE routing is in neither trace: a reused prompt prefix)\n");
  else
    EXPECT_LT(p.disagreement, kSameForward)
        << what << ": the runs' numbers differ where they agree";
  if (!sampled) EXPECT_LT(p.margin, kNearTie) << what << ": a parting without a near-tie is a bug";
}

bool expect_same_or_near_tie(const std::string& what, const std::vector<int32_t>& run_ids,
                             const DecodeTrace& run, const std::vector<int32_t>& reference_ids,
                             const DecodeTrace& reference, const DecodeParams& d) {
  if (run_ids == reference_ids) return true;
  const auto parting = first_parting(run, reference, d);
  EXPECT_TRUE(parting.has_value()) << what << ": different ids from the same canvases";
  if (parting) expect_near_tie(what, *parting, d);
  return false;
}

}  // namespace dllm::test
