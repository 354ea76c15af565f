#include "support/decision_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dllm::test {

void record_forward(DecodeTrace& trace, const Decoder& decoder,
                    std::span<const SequenceResult> results) {
  if (!trace.empty() && decoder.forwards() <= trace.back().decoder_forwards) trace.clear();
  ForwardRecord& r = trace.emplace_back();
  r.decoder_forwards = decoder.forwards();
  r.canvas = decoder.canvas();
  for (const SequenceResult& s : results) {
    r.stats.insert(r.stats.end(), s.stats.begin(), s.stats.end());
    r.verify.insert(r.verify.end(), s.verify_rows.begin(), s.verify_rows.end());
  }
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
  return parting_at(f, run[f], reference[f], d);
}

Parting parting_at(size_t forward, const ForwardRecord& run, const ForwardRecord& reference,
                   const DecodeParams& d) {
  Parting p;
  p.forward = forward;
  p.margin = closest_decision_margin(reference.stats, d);
  p.disagreement = std::max(stats_disagreement(run.stats, reference.stats),
                            verify_disagreement(run.verify, reference.verify));
  return p;
}

void expect_near_tie(const std::string& what, const Parting& p, const DecodeParams& d,
                     bool routes_experts) {
  const bool sampled = d.sampler.temperature > 0;
  std::printf(
      "  %s: parted at forward %zu; closest reference decision margin %.4f, probabilities where "
      "alike %.2e%s%s\n",
      what.c_str(), p.forward, p.margin, p.disagreement, sampled ? " (sampled)" : "",
      routes_experts ? " (MoE routing: not bounded)" : "");
  if (!routes_experts)
    EXPECT_LT(p.disagreement, kSameForward)
        << what << ": the runs' numbers differ where they agree";
  if (!sampled) EXPECT_LT(p.margin, kNearTie) << what << ": a parting without a near-tie is a bug";
}

bool expect_same_or_near_tie(const std::string& what, const std::vector<int32_t>& run_ids,
                             const DecodeTrace& run, const std::vector<int32_t>& reference_ids,
                             const DecodeTrace& reference, const DecodeParams& d,
                             bool routes_experts) {
  if (run_ids == reference_ids) return true;
  const auto parting = first_parting(run, reference, d);
  EXPECT_TRUE(parting.has_value()) << what << ": different ids from the same canvases";
  if (parting) expect_near_tie(what, *parting, d, routes_experts);
  return false;
}

}  // namespace dllm::test
