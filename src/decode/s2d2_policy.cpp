#include "decode/s2d2_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace dllm {

void S2d2Params::validate() const {
  if (policy != "span" && policy != "score" && policy != "hysteresis" && policy != "bandit")
    fail("--verify-policy '", policy, "' (expected span, score, hysteresis or bandit)");
  if (span_min < 1) fail("--verify-span-min must be >= 1 (got ", span_min, ")");
  if (score_type != "static" && score_type != "dynamic")
    fail("--verify-score-type '", score_type, "' (expected static or dynamic)");
  if (!std::isfinite(score_cost) || score_cost < 0)
    fail("--verify-cost must be >= 0 (got ", score_cost, ")");
  if (!std::isfinite(score_threshold))
    fail("--verify-threshold must be finite (got ", score_threshold, ")");
  if (!std::isfinite(hysteresis_on) || !std::isfinite(hysteresis_off) ||
      !(hysteresis_on > hysteresis_off))
    fail("--hysteresis-on (", hysteresis_on, ") must be greater than --hysteresis-off (",
         hysteresis_off, ")");
  if (estimator != "soft-entropy" && estimator != "hard-margin" && estimator != "hard-entropy" &&
      estimator != "confidence-power" && estimator != "clipped-linear-margin" &&
      estimator != "renyi-2")
    fail("--acceptance-estimator '", estimator,
         "' (expected soft-entropy, hard-margin, hard-entropy, confidence-power, "
         "clipped-linear-margin or renyi-2)");
  if (!std::isfinite(entropy_beta) || entropy_beta < 0)
    fail("--entropy-beta must be >= 0 (got ", entropy_beta, ")");
  if (!std::isfinite(margin_threshold)) fail("--margin-threshold must be finite");
  if (!std::isfinite(entropy_threshold)) fail("--hard-entropy-threshold must be finite");
  if (!std::isfinite(confidence_power) || confidence_power < 0)
    fail("--confidence-power must be >= 0 (got ", confidence_power, ")");
  if (!std::isfinite(margin_coef)) fail("--margin-coef must be finite");
  if (!std::isfinite(gamma) || !(gamma > 0)) fail("--accept-gamma must be > 0 (got ", gamma, ")");
  if (!std::isfinite(ucb_beta) || ucb_beta < 0)
    fail("--ucb-beta must be >= 0 (got ", ucb_beta, ")");
  if (ucb_span_bins < 1 || ucb_progress_bins < 1 || ucb_entropy_bins < 1 ||
      ucb_span_bins * ucb_progress_bins * ucb_entropy_bins > (1 << 20))
    fail("--ucb-bins must be three positive counts (got ", ucb_span_bins, ",", ucb_progress_bins,
         ",", ucb_entropy_bins, ")");
}

double normalized_entropy(const std::vector<double>& probs) {
  if (probs.size() <= 1) return 0.0;
  double h = 0;
  for (double v : probs) h -= v * std::log(std::max(v, 1e-12));
  return h / std::log(static_cast<double>(probs.size()));
}

namespace {

double top_margin(const std::vector<double>& probs) {
  if (probs.size() < 2) return probs.empty() ? 0.0 : probs[0];
  double a = -1, b = -1;
  for (double v : probs) {
    if (v > a) {
      b = a;
      a = v;
    } else if (v > b) {
      b = v;
    }
  }
  return a - b;
}

// Reference _linear_bin_idx: clamp to [lo, hi], then floor(ratio * bins), capped at bins - 1.
int32_t linear_bin(double v, double lo, double hi, int32_t bins) {
  if (bins <= 1 || hi <= lo) return 0;
  v = std::min(std::max(v, lo), hi);
  const auto idx = static_cast<int32_t>((v - lo) / (hi - lo) * bins);
  return std::min(bins - 1, std::max(0, idx));
}

}  // namespace

SpanRowStats span_row_stats(const std::vector<double>& probs, int32_t token) {
  SpanRowStats r;
  r.norm_entropy = normalized_entropy(probs);
  r.margin = top_margin(probs);
  for (double v : probs) r.collision += v * v;
  r.p_token = probs[static_cast<size_t>(token)];
  return r;
}

std::vector<double> acceptance_estimates(const S2d2Params& p, const SpanContext& ctx) {
  std::vector<double> alpha;
  for (const SpanRowStats& row : ctx.span_rows) {
    double a = 0;
    if (p.estimator == "soft-entropy") {
      a = std::exp(-static_cast<double>(p.entropy_beta) * row.norm_entropy);
    } else if (p.estimator == "hard-margin") {
      a = row.margin > p.margin_threshold ? 1.0 : 0.0;
    } else if (p.estimator == "hard-entropy") {
      a = row.norm_entropy < p.entropy_threshold ? 1.0 : 0.0;
    } else if (p.estimator == "confidence-power") {
      a = std::pow(std::clamp(row.p_token, 0.0, 1.0), static_cast<double>(p.confidence_power));
    } else if (p.estimator == "clipped-linear-margin") {
      a = std::clamp(p.margin_coef * row.margin, 0.0, 1.0);
    } else {  // renyi-2
      a = std::clamp(row.collision, 0.0, 1.0);
    }
    alpha.push_back(a);
  }
  return alpha;
}

double expected_accepted(const std::vector<double>& alpha) {
  double prod = 1, sum = 0;
  for (double a : alpha) {
    prod *= std::clamp(a, 0.0, 1.0);
    sum += prod;
  }
  return sum;
}

double verify_score(const S2d2Params& p, const SpanContext& ctx) {
  if (ctx.span_rows.empty()) return -std::numeric_limits<double>::infinity();
  const double k = expected_accepted(acceptance_estimates(p, ctx));
  const double c = p.score_cost;
  return p.score_type == "static" ? k - c : k - c * ctx.high_confidence;
}

bool S2d2Router::decide(const SpanContext& ctx) {
  action_ = -1;
  bucket_ = -1;
  const int32_t span = ctx.span_length;
  if (p_.policy == "span") return span >= p_.span_min;
  if (p_.policy == "score") return !(verify_score(p_, ctx) < p_.score_threshold);
  if (p_.policy == "hysteresis") {
    const double s = verify_score(p_, ctx);
    // The reference's strict comparisons (the paper writes >= for turning on).
    hysteresis_on_ = hysteresis_on_ ? !(s < p_.hysteresis_off) : s > p_.hysteresis_on;
    return hysteresis_on_;
  }
  // Contextual UCB bandit over (span length, block progress, mean normalised span entropy).
  ++decisions_;
  double mean_h = 0;
  for (const SpanRowStats& row : ctx.span_rows) mean_h += row.norm_entropy;
  if (span > 0) mean_h /= span;
  const double progress =
      std::clamp(double(ctx.unmasked_in_block) / double(std::max(1, ctx.block_length)), 0.0, 1.0);
  const int32_t sb =
      linear_bin(std::max(1, span), 1.0, std::max(1, ctx.block_length), p_.ucb_span_bins);
  const int32_t pb = linear_bin(progress, 0.0, 1.0, p_.ucb_progress_bins);
  const int32_t eb = linear_bin(mean_h, 0.0, 1.0, p_.ucb_entropy_bins);
  bucket_ = (sb * p_.ucb_progress_bins + pb) * p_.ucb_entropy_bins + eb;
  const double log_t = std::log(static_cast<double>(std::max<int64_t>(1, decisions_)));
  double score[2];
  for (int a = 0; a < 2; ++a) {
    const int64_t n = count_[a][static_cast<size_t>(bucket_)];
    if (n == 0) {
      score[a] = std::numeric_limits<double>::infinity();  // untried arm first
      continue;
    }
    const double mu = reward_[a][static_cast<size_t>(bucket_)] / double(n);
    score[a] = mu + (log_t <= 0 ? 0.0 : p_.ucb_beta * std::sqrt(log_t / double(n)));
  }
  action_ = score[1] >= score[0] ? 1 : 0;  // ties -> verify
  return action_ == 1;
}

void S2d2Router::record(int32_t decoded) {
  if (action_ < 0) return;
  const size_t b = static_cast<size_t>(bucket_);
  ++count_[action_][b];
  reward_[action_][b] += double(decoded) / (action_ == 1 ? 2.0 : 1.0);
  action_ = -1;
}

}  // namespace dllm
