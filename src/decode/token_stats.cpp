#include "decode/token_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace dllm {

void SamplerConfig::validate() const {
  if (std::isnan(temperature) || temperature < 0)
    fail("--temperature must be >= 0 (got ", temperature, ")");
  if (top_k < 0) fail("--top-k must be >= 0 (got ", top_k, ")");
  if (!(top_p > 0.0f) || top_p > 1.0f) fail("--top-p must be in (0, 1] (got ", top_p, ")");
  if (method == SampleMethod::kGumbelMax && (top_k != 0 || top_p < 1.0f))
    fail(
        "--top-k and --top-p do not apply to Gumbel-max sampling (LLaDA samples from the full "
        "distribution)");
}

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Keeps logits >= the k-th largest (ties at the boundary are kept, like torch.topk-based filters).
void apply_top_k(std::vector<float>& x, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= x.size()) return;
  std::vector<float> tmp(x);
  std::nth_element(tmp.begin(), tmp.begin() + (k - 1), tmp.end(), std::greater<float>());
  const float kth = tmp[static_cast<size_t>(k - 1)];
  for (float& v : x)
    if (v < kth) v = kNegInf;
}

// Nucleus filter on softmax(x): sort descending, drop tokens once the cumulative probability
// *before* them exceeds p (the first token is always kept).
void apply_top_p(std::vector<float>& x, float p) {
  if (!(p < 1.0f)) return;
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  // Stable: among equal logits the lower id comes first.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  const float mx = x[order[0]];
  double z = 0;
  for (float v : x) z += std::exp(static_cast<double>(v) - mx);
  double cum = 0;
  bool drop = false;
  for (int32_t id : order) {
    if (drop) {
      x[id] = kNegInf;
      continue;
    }
    cum += std::exp(static_cast<double>(x[id]) - mx) / z;
    if (cum > p) drop = true;  // this one stays, everything after goes
  }
}

struct Softmax {
  std::vector<double> p;
  int32_t top1 = 0;
  double p1 = 0, p2 = 0, entropy = 0;
};

Softmax softmax_stats(const std::vector<float>& x) {
  Softmax s;
  const float mx = *std::max_element(x.begin(), x.end());
  s.p.resize(x.size());
  double z = 0;
  for (size_t i = 0; i < x.size(); ++i)
    z += s.p[i] = x[i] == kNegInf ? 0.0 : std::exp(double(x[i]) - mx);
  double h = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    s.p[i] /= z;
    if (s.p[i] > 0) h -= s.p[i] * std::log(s.p[i]);
    if (s.p[i] > s.p1) {
      s.p2 = s.p1;
      s.p1 = s.p[i];
      s.top1 = static_cast<int32_t>(i);
    } else if (s.p[i] > s.p2) {
      s.p2 = s.p[i];
    }
  }
  s.entropy = h;
  return s;
}

// LLaDA's add_gumbel_noise + argmax, in float64 like the reference: exp(l) / (-log u)^T, the
// first maximum wins (torch.argmax). Banned tokens have l = -inf, hence value 0.
int32_t gumbel_max(const std::vector<float>& x, double temperature, const RngKey& rng,
                   int32_t position) {
  int32_t best = 0;
  double best_v = -1.0;
  for (size_t v = 0; v < x.size(); ++v) {
    const double u = uniform(rng, position, RngStream::kGumbel, static_cast<uint32_t>(v));
    const double val = gumbel_key(x[v], u, temperature);
    if (val > best_v) {
      best_v = val;
      best = static_cast<int32_t>(v);
    }
  }
  return best;
}

// Temperature (1 when greedy), top-k and top-p in the sampler's order, in place: the sampling
// distribution is softmax(x) afterwards.
void apply_filters(std::vector<float>& x, const SamplerConfig& sampler) {
  const float t = sampler.greedy() ? 1.0f : sampler.temperature;
  auto scale = [&] {
    if (t != 1.0f)
      for (float& v : x) v /= t;
  };
  switch (sampler.order) {
    case FilterOrder::kTemperatureTopKTopP:
      scale();
      apply_top_k(x, sampler.top_k);
      apply_top_p(x, sampler.top_p);
      break;
    case FilterOrder::kTemperatureTopPTopK:
      scale();
      apply_top_p(x, sampler.top_p);
      apply_top_k(x, sampler.top_k);
      break;
    case FilterOrder::kTopKTopPTemperature:
      apply_top_k(x, sampler.top_k);
      apply_top_p(x, sampler.top_p);
      scale();
      break;
  }
}

// True when apply_filters leaves every logit as it is (temperature 1, or greedy; no top-k or top-p
// that can drop a token): the sampling distribution is then the raw one, bit for bit, and need not
// be computed twice (two thirds of a greedy row's exp / log calls, the bulk of a step's token
// statistics on a small model; docs/benchmarks.md, issue 18).
bool filters_keep_everything(const SamplerConfig& sampler, size_t vocab) {
  const float t = sampler.greedy() ? 1.0f : sampler.temperature;
  const bool top_k_off = sampler.top_k <= 0 || static_cast<size_t>(sampler.top_k) >= vocab;
  return t == 1.0f && top_k_off && !(sampler.top_p < 1.0f);
}

TokenStats token_stats(std::span<const float> logits, const SamplerConfig& sampler, double u,
                       const RngKey* rng, int32_t position) {
  TokenStats st;
  std::vector<float> raw_logits(logits.begin(), logits.end());
  for (int32_t id : sampler.banned_tokens)
    if (id >= 0 && static_cast<size_t>(id) < raw_logits.size())
      raw_logits[static_cast<size_t>(id)] = kNegInf;
  const Softmax raw = softmax_stats(raw_logits);
  st.argmax = raw.top1;
  st.p_max = static_cast<float>(raw.p1);
  st.entropy = static_cast<float>(raw.entropy);
  st.margin = static_cast<float>(raw.p1 - raw.p2);

  const bool greedy = sampler.greedy();
  const bool unfiltered = filters_keep_everything(sampler, raw_logits.size());
  Softmax filtered;
  if (!unfiltered) {
    std::vector<float> x = raw_logits;
    apply_filters(x, sampler);
    filtered = softmax_stats(x);
  }
  const Softmax& filt = unfiltered ? raw : filtered;
  if (greedy) {
    st.token = filt.top1;
  } else if (sampler.method == SampleMethod::kGumbelMax) {
    if (!rng) fail("Gumbel-max sampling needs the RNG key (internal error)");
    st.token = gumbel_max(raw_logits, static_cast<double>(sampler.temperature), *rng, position);
  } else {
    // Inverse CDF in id order with double accumulation (tools/dllm_rng.py does the same).
    const double target = u;
    double cum = 0;
    st.token = -1;
    int32_t last_kept = 0;
    for (size_t i = 0; i < filt.p.size(); ++i) {
      if (filt.p[i] <= 0) continue;
      last_kept = static_cast<int32_t>(i);
      cum += filt.p[i];
      if (cum > target) {
        st.token = static_cast<int32_t>(i);
        break;
      }
    }
    if (st.token < 0) st.token = last_kept;  // u within rounding of 1
  }
  st.p_token = static_cast<float>(filt.p[static_cast<size_t>(st.token)]);
  st.entropy_filtered = static_cast<float>(filt.entropy);
  st.margin_filtered = static_cast<float>(filt.p1 - filt.p2);
  // Probability under softmax(logits / T) before any filter. At T = 1 that is the raw softmax:
  // the same exp(l - max) terms summed in the same order, the same division.
  const float t = greedy ? 1.0f : sampler.temperature;
  if (t == 1.0f) {
    st.p_token_tempered = static_cast<float>(raw.p[static_cast<size_t>(st.token)]);
  } else {
    const float mx = *std::max_element(raw_logits.begin(), raw_logits.end());
    double z = 0;
    for (float v : raw_logits)
      if (v != kNegInf) z += std::exp((double(v) - mx) / t);
    st.p_token_tempered = static_cast<float>(
        std::exp((double(raw_logits[static_cast<size_t>(st.token)]) - mx) / t) / z);
  }
  if (sampler.confidence_banned_tokens.empty()) {
    st.p_token_raw = static_cast<float>(raw.p[static_cast<size_t>(st.token)]);
  } else {
    std::vector<float> c = raw_logits;
    for (int32_t id : sampler.confidence_banned_tokens)
      if (id >= 0 && static_cast<size_t>(id) < c.size()) c[static_cast<size_t>(id)] = kNegInf;
    const bool all_banned = std::all_of(c.begin(), c.end(), [](float v) { return v == kNegInf; });
    st.p_token_raw =
        all_banned ? 0.0f : static_cast<float>(softmax_stats(c).p[static_cast<size_t>(st.token)]);
  }
  return st;
}

}  // namespace

double gumbel_key(float logit, double u, double temperature) {
  return std::exp(static_cast<double>(logit)) / std::pow(-std::log(u), temperature);
}

TokenStats compute_token_stats(std::span<const float> logits, const SamplerConfig& sampler,
                               const RngKey& rng, int32_t position) {
  const double u = sampler.greedy() || sampler.method != SampleMethod::kInverseCdf
                       ? 0.0
                       : uniform(rng, position, RngStream::kTokenSample);
  return token_stats(logits, sampler, u, &rng, position);
}

TokenStats compute_token_stats(std::span<const float> logits, const SamplerConfig& sampler,
                               double u) {
  return token_stats(logits, sampler, u, nullptr, 0);
}

std::vector<double> sampling_distribution(std::span<const float> logits,
                                          const SamplerConfig& sampler) {
  std::vector<float> x(logits.begin(), logits.end());
  for (int32_t id : sampler.banned_tokens)
    if (id >= 0 && static_cast<size_t>(id) < x.size()) x[static_cast<size_t>(id)] = kNegInf;
  apply_filters(x, sampler);
  return softmax_stats(x).p;
}

}  // namespace dllm
