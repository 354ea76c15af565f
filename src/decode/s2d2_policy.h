// S2D2 routing (method-specs §5.3): whether a step verifies its first masked span. Acceptance
// estimators turn the draft's span distributions into per-token acceptance guesses α_i, the
// expected accepted length K̂ = Σ_k Π_{i≤k} α_i gives a score, and a policy decides. Policy state
// (hysteresis on/off, bandit counts) lives in S2d2Router and persists across blocks of a request.
#pragma once

#include <cstdint>
#include <string>

#include <vector>
#include "backend/forward_batch.h"

namespace dllm {

struct S2d2Params {
  // span | score | hysteresis | bandit (reference names: mask_span_length, score_threshold,
  // score_hysteresis, contextual_bandit_ucb)
  std::string policy = "span";
  int32_t span_min = 1;  // span: verify iff |C| >= span_min (1: always)
  // Every policy but span reads the span rows' statistics (estimators, bandit entropy).
  bool needs_span_distributions() const { return policy != "span"; }
  std::string score_type = "dynamic";  // static: K̂ - c; dynamic: K̂ - c * N_hi
  float score_cost = 2.0f;             // c
  float score_threshold = 0.0f;        // score: verify iff s >= threshold
  float hysteresis_on = 0.0f;          // OFF -> ON iff s > on
  float hysteresis_off = -1.0f;        // ON -> OFF iff s < off
  // soft-entropy | hard-margin | hard-entropy | confidence-power | clipped-linear-margin | renyi-2
  std::string estimator = "hard-margin";
  float entropy_beta = 1.0f;       // soft-entropy: α = exp(-β H / ln V)
  float margin_threshold = 0.05f;  // hard-margin
  // The S2D2 command lines' defaults (SDAR/generate_ssd_policy.py and the eval scripts: 0.1, 0.8,
  // 1.0), not generate()'s signature defaults (0.5, 1.0, 1.0), as for the score threshold.
  float entropy_threshold = 0.1f;  // hard-entropy (normalised entropy)
  float confidence_power = 0.8f;   // confidence-power
  float margin_coef = 1.0f;        // clipped-linear-margin
  float gamma = 1.0f;              // acceptance tempering: min(1, (q/p)^γ)
  float ucb_beta = 1.0f;
  int32_t ucb_span_bins = 2, ucb_progress_bins = 2, ucb_entropy_bins = 2;
  bool cache_ver = false;  // §5.4: prefill / commit forwards causal
  bool draft_ver = false;  // §5.4: decoded in-block prefix rows causal in draft forwards

  void validate() const;  // Error naming the bad parameter
};

// What a step knows when it decides (all from the draft forward).
struct SpanContext {
  int32_t span_length = 0;  // |C|: the first contiguous masked run
  // What the estimators read of the span rows' sampling distributions, left to right: filled
  // only for the policies that read them (S2d2Params::needs_span_distributions).
  std::vector<SpanRowStats> span_rows;
  int32_t high_confidence = 0;  // N_hi: masked positions with p > the family threshold
  int32_t block_length = 0;
  int32_t unmasked_in_block = 0;  // decoded so far in this block by S2D2 steps (progress)
};

// SpanRowStats of a sampling distribution and the row's token (the backends' host path).
SpanRowStats span_row_stats(const std::vector<double>& probs, int32_t token);

// α_i for each span row.
std::vector<double> acceptance_estimates(const S2d2Params& p, const SpanContext& ctx);
// K̂ = Σ_k Π_{i≤k} clip(α_i, 0, 1).
double expected_accepted(const std::vector<double>& alpha);
double verify_score(const S2d2Params& p, const SpanContext& ctx);
double normalized_entropy(const std::vector<double>& probs);

class S2d2Router {
 public:
  explicit S2d2Router(const S2d2Params& p) : p_(p) {
    const size_t buckets =
        static_cast<size_t>(p.ucb_span_bins * p.ucb_progress_bins * p.ucb_entropy_bins);
    for (auto& a : count_) a.assign(buckets, 0);
    for (auto& a : reward_) a.assign(buckets, 0.0);
  }
  // Decides for this step (updates hysteresis / bandit decision state).
  bool decide(const SpanContext& ctx);
  // After the step: tokens decoded in it (bandit reward).
  void record(int32_t decoded);
  // A step without a masked span (LLaDA2.1's post-mask editing forwards): the LLaDA2 reference
  // (S2D2 LLaDA2/generate_utils.py, generate_ssd_policy) still runs its policy there, scoring
  // the empty span -inf, which switches hysteresis off; nothing else is decided or learned.
  void no_span() {
    hysteresis_on_ = false;
    action_ = -1;
  }
  int32_t last_bucket() const { return bucket_; }

 private:
  S2d2Params p_;
  bool hysteresis_on_ = false;
  int64_t decisions_ = 0;
  std::vector<int64_t> count_[2];
  std::vector<double> reward_[2];
  int32_t bucket_ = -1;
  int32_t action_ = -1;
};

}  // namespace dllm
