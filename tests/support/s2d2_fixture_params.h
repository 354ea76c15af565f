// DecodeParams of an S2D2 trajectory fixture case (tools/reference_s2d2.py and, for LLaDA2.x,
// tools/reference_llada2_methods.py write them); shared
// by the CPU parity test and the GPU-vs-CPU test.
#pragma once

#include <nlohmann/json.hpp>

#include "decode/decoder.h"

namespace dllm::test {

inline DecodeParams s2d2_params_from(const nlohmann::json& p) {
  DecodeParams d;
  d.strategy = p["strategy"];
  d.max_tokens = p["max_tokens"];
  d.block_length = p["block_length"];
  d.steps = p["steps"];
  d.threshold = p["threshold"];
  d.remasking = p["remasking"];
  d.sub_block_length = p["sub_block_length"];
  d.confidence =
      p["confidence"] == "filtered" ? ConfidenceKind::kFiltered : ConfidenceKind::kTempered;
  d.sampler.temperature = p["temperature"];
  d.sampler.top_k = p["top_k"];
  d.sampler.top_p = p["top_p"];
  d.seed = p["seed"];
  d.hf_sampling_quirk = p.value("hf_quirk", false);  // LLaDA2.x (tools/reference_llada2_methods.py)
  // LLaDA2.x: S2D2 over LLaDA2.1 token editing (--edit-mode and its knobs).
  if (p.contains("edit_mode")) {
    d.edit_mode = p["edit_mode"];
    d.editing_threshold = p["editing_threshold"];
    d.max_post_steps = p["max_post_steps"];
  }
  const auto& s = p["s2d2"];
  S2d2Params& o = d.s2d2;
  o.policy = s["policy"];
  o.span_min = s["span_min"];
  o.score_type = s["score_type"];
  o.score_cost = s["score_cost"];
  o.score_threshold = s["score_threshold"];
  o.hysteresis_on = s["hysteresis_on"];
  o.hysteresis_off = s["hysteresis_off"];
  o.estimator = s["estimator"];
  o.entropy_beta = s["entropy_beta"];
  o.margin_threshold = s["margin_threshold"];
  o.entropy_threshold = s["entropy_threshold"];
  o.confidence_power = s["confidence_power"];
  o.margin_coef = s["margin_coef"];
  o.gamma = s["gamma"];
  o.ucb_beta = s["ucb_beta"];
  o.ucb_span_bins = s["ucb_span_bins"];
  o.ucb_progress_bins = s["ucb_progress_bins"];
  o.ucb_entropy_bins = s["ucb_entropy_bins"];
  o.cache_ver = s["cache_ver"];
  o.draft_ver = s["draft_ver"];
  return d;
}

}  // namespace dllm::test
