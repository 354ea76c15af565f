// Full (bidirectional) diffusion decoders, LLaDA-8B / LLaDA 1.5 and Dream-7B, as their reference
// loops run them: no KV cache, every step one bidirectional forward of the whole canvas
// (prompt + max_tokens). The schedules live in full_diffusion_schedule.h.
#pragma once

#include "decode/decoder.h"
#include "decode/full_diffusion_schedule.h"

namespace dllm {

// LLaDA generate.py (model-specs §4.5). Per step, the masks of the current block are decided:
// x0 by Gumbel-max (SampleMethod::kGumbelMax; argmax when greedy), confidence softmax(logits)[x0]
// (TokenStats::p_token_raw) or, for remasking 'random', uniform(key, position, kRemask).
// Classifier-free guidance (cfg_scale > 0): each step forwards the canvas and the canvas with the
// prompt masked as two sequences of one batch, both returning full logits rows for the pending
// masks; the decoder combines them as un + (cfg + 1)(cond - un) and computes the TokenStats on
// the host (compute_token_stats, the same function the backends use).
class LladaDecoder final : public Decoder {
 public:
  LladaDecoder(const ModelConfig& config, const DecodeParams& params,
               const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  bool plan_step(std::vector<SequenceForward>& fwds) override;
  void observe_step(std::span<const SequenceResult> results) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override { return 0; }

 private:
  void apply(const std::vector<TokenStats>& stats);
  void update_final();

  DecodeParams params_;
  int32_t mask_id_;
  int64_t vocab_;
  LladaSchedule schedule_;
  std::vector<int32_t> pending_;  // canvas positions decided by the planned step
  RngKey rng_;                    // the planned step's key
};

// Dream diffusion_generate / _sample (model-specs §5.3), with right-shifted logits: the token at
// position j comes from output row j - 1. Algorithms: origin (each mask transferred with
// probability 1 - s/t, drawn as uniform(key, j, kRemask) < p), maskgit_plus (confidence = p of the
// token under the filtered distribution), topk_margin (top1 - top2 of it), entropy (its negative
// entropy). With alg_temp > 0 the positions are drawn without replacement from
// softmax(confidence / alg_temp), as Gumbel-top-k: the n largest confidence / alg_temp - log(-log
// u_j) with u_j = uniform(key, j, kRemask).
class DreamDecoder final : public Decoder {
 public:
  DreamDecoder(const ModelConfig& config, const DecodeParams& params,
               const std::vector<int32_t>& prompt);

  bool plan(SequenceForward& fwd) override;
  void observe(const SequenceResult& result) override;
  std::vector<int32_t> canvas() const override;
  int64_t cache_capacity() const override { return 0; }

 private:
  void update_final();

  DecodeParams params_;
  int32_t mask_id_;
  DreamSchedule schedule_;
  std::vector<int32_t> pending_;  // canvas positions whose stats the planned step asked for
  int32_t transfer_ = 0;          // tokens the planned step unmasks (non-origin algorithms)
  RngKey rng_;
};

}  // namespace dllm
