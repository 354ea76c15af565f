#include "decode/vocab_parallel_stats.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace dllm {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The sampling distribution's temperature: softmax(l / t), t = 1 when greedy.
double temperature_of(const SamplerConfig& sampler) {
  return sampler.greedy() ? 1.0 : static_cast<double>(sampler.temperature);
}

// The slice with the sampler's banned tokens at -inf (compute_token_stats does the same).
std::vector<float> unbanned_slice(std::span<const float> logits, int32_t vocab_begin,
                                  const SamplerConfig& sampler) {
  std::vector<float> x(logits.begin(), logits.end());
  for (int32_t id : sampler.banned_tokens) {
    const int64_t at = int64_t{id} - vocab_begin;
    if (at >= 0 && at < static_cast<int64_t>(x.size())) x[static_cast<size_t>(at)] = kNegInf;
  }
  return x;
}

// Per id of the slice: whether the confidence distribution leaves it out.
std::vector<char> confidence_banned_in(size_t n, int32_t vocab_begin,
                                       const SamplerConfig& sampler) {
  std::vector<char> out(n, 0);
  for (int32_t id : sampler.confidence_banned_tokens) {
    const int64_t at = int64_t{id} - vocab_begin;
    if (at >= 0 && at < static_cast<int64_t>(n)) out[static_cast<size_t>(at)] = 1;
  }
  return out;
}

// The first maximum and the second largest value (a tie with the maximum counts), as
// softmax_stats() ranks probabilities.
void rank_maxima(const std::vector<float>& x, int32_t vocab_begin, VocabShardPartial& p) {
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    if (v == kNegInf) continue;
    if (v > p.max_logit) {
      p.second_logit = p.max_logit;
      p.max_logit = v;
      p.argmax = vocab_begin + static_cast<int32_t>(i);
    } else if (v > p.second_logit) {
      p.second_logit = v;
    }
  }
}

// LLaDA's Gumbel-max over the slice, value for value as compute_token_stats computes it (the
// draws' index is the global id): exp(l) / (-log u)^T, the first maximum wins.
void gumbel_winner(const std::vector<float>& x, int32_t vocab_begin, double temperature,
                   const RngKey& rng, int32_t position, VocabShardPartial& p) {
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t id = static_cast<uint32_t>(vocab_begin) + static_cast<uint32_t>(i);
    const double u = uniform(rng, position, RngStream::kGumbel, id);
    const double value = gumbel_key(x[i], u, temperature);
    if (value > p.gumbel_value) {
      p.gumbel_value = value;
      p.gumbel_token = static_cast<int32_t>(id);
      p.gumbel_logit = x[i];
    }
  }
}

// The merged row's reference point M (the largest logit), and each shard's scale to it.
struct MergedScale {
  float max_logit = kNegInf;
  double raw(const VocabShardPartial& p) const {
    return p.argmax < 0 ? 0.0 : std::exp(static_cast<double>(p.max_logit) - max_logit);
  }
  double tempered(const VocabShardPartial& p, double t) const {
    return p.argmax < 0 ? 0.0 : std::exp((static_cast<double>(p.max_logit) - max_logit) / t);
  }
};

MergedScale merged_scale(std::span<const VocabShardPartial> shards) {
  MergedScale s;
  for (const VocabShardPartial& p : shards)
    if (p.argmax >= 0) s.max_logit = std::max(s.max_logit, p.max_logit);
  return s;
}

// The second largest logit of the row: the second of every shard's two largest.
float second_logit_of(std::span<const VocabShardPartial> shards) {
  std::vector<float> top;
  for (const VocabShardPartial& p : shards) {
    top.push_back(p.max_logit);
    top.push_back(p.second_logit);
  }
  std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
  return top[1];
}

// The token a greedy or Gumbel-max row chose from the partials; drawn otherwise.
DrawnToken chosen_token(std::span<const VocabShardPartial> shards, const SamplerConfig& sampler,
                        const MergedScale& scale, DrawnToken drawn) {
  if (sampler.greedy()) {
    for (const VocabShardPartial& p : shards)
      if (p.argmax >= 0 && p.max_logit == scale.max_logit) return {p.argmax, p.max_logit};
  }
  if (sampler.method == SampleMethod::kGumbelMax) {
    const VocabShardPartial* best = &shards.front();
    for (const VocabShardPartial& p : shards)
      if (p.gumbel_value > best->gumbel_value) best = &p;
    return {best->gumbel_token, best->gumbel_logit};
  }
  return drawn;
}

bool is_confidence_banned(const SamplerConfig& sampler, int32_t token) {
  const auto& banned = sampler.confidence_banned_tokens;
  return std::find(banned.begin(), banned.end(), token) != banned.end();
}

}  // namespace

bool vocab_shards_merge(const SamplerConfig& sampler, int64_t vocab) {
  const bool top_k_off = sampler.top_k <= 0 || sampler.top_k >= vocab;
  return top_k_off && !(sampler.top_p < 1.0f);
}

VocabShardPartial vocab_shard_partial(std::span<const float> logits, int32_t vocab_begin,
                                      const SamplerConfig& sampler, const RngKey* rng,
                                      int32_t position) {
  VocabShardPartial p;
  p.vocab_begin = vocab_begin;
  const std::vector<float> x = unbanned_slice(logits, vocab_begin, sampler);
  rank_maxima(x, vocab_begin, p);
  const double t = temperature_of(sampler);
  const std::vector<char> confidence_banned = confidence_banned_in(x.size(), vocab_begin, sampler);
  if (p.argmax >= 0) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i] == kNegInf) continue;
      const double d = static_cast<double>(x[i]) - p.max_logit;
      const double e = std::exp(d), dt = d / t, et = std::exp(dt);
      p.sum_exp += e;
      p.sum_exp_shifted += e * d;
      p.sum_exp_sq += e * e;
      p.sum_exp_tempered += et;
      p.sum_exp_tempered_shifted += et * dt;
      if (!confidence_banned[i]) p.confidence_exp += e;
    }
  }
  if (!sampler.greedy() && sampler.method == SampleMethod::kGumbelMax) {
    if (!rng) fail("Gumbel-max sampling needs the RNG key (internal error)");
    gumbel_winner(x, vocab_begin, static_cast<double>(sampler.temperature), *rng, position, p);
  }
  return p;
}

ShardDraw locate_shard_draw(std::span<const VocabShardPartial> shards, const SamplerConfig& sampler,
                            double u) {
  const MergedScale scale = merged_scale(shards);
  const double t = temperature_of(sampler);
  double z = 0;
  for (const VocabShardPartial& p : shards) z += scale.tempered(p, t) * p.sum_exp_tempered;
  const double target = u * z;
  double cum = 0;
  ShardDraw last{0, std::numeric_limits<double>::infinity()};
  for (size_t r = 0; r < shards.size(); ++r) {
    const double to_merged = scale.tempered(shards[r], t);
    const double mass = to_merged * shards[r].sum_exp_tempered;
    if (!(mass > 0)) continue;
    if (cum + mass > target) return {r, (target - cum) / to_merged};
    cum += mass;
    last.shard = r;  // rounding left u unreached: the last shard's last token, as at u near 1
  }
  return last;
}

DrawnToken draw_in_shard(std::span<const float> logits, int32_t vocab_begin,
                         const SamplerConfig& sampler, double local_target) {
  const std::vector<float> x = unbanned_slice(logits, vocab_begin, sampler);
  const float mx = *std::max_element(x.begin(), x.end());
  const double t = temperature_of(sampler);
  DrawnToken last;
  double cum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == kNegInf) continue;
    last = {vocab_begin + static_cast<int32_t>(i), x[i]};
    cum += std::exp((static_cast<double>(x[i]) - mx) / t);
    if (cum > local_target) return last;
  }
  return last;
}

TokenStats merge_vocab_shards(std::span<const VocabShardPartial> shards,
                              const SamplerConfig& sampler, DrawnToken drawn) {
  if (shards.empty()) fail("merge_vocab_shards: no shards");
  const MergedScale scale = merged_scale(shards);
  const double t = temperature_of(sampler);
  const double m = scale.max_logit;
  // Sums over the whole row relative to M: sum exp(l - M) = sum_r exp(m_r - M) sum_exp_r, and
  // the entropy's sum exp(l - M) (l - M) with (l - M) = (l - m_r) + (m_r - M).
  double z = 0, zs = 0, zc = 0, zt = 0, zts = 0;
  for (const VocabShardPartial& p : shards) {
    const double w = scale.raw(p), wt = scale.tempered(p, t);
    const double shift = p.argmax < 0 ? 0.0 : static_cast<double>(p.max_logit) - m;
    z += w * p.sum_exp;
    zs += w * (p.sum_exp_shifted + shift * p.sum_exp);
    zc += w * p.confidence_exp;
    zt += wt * p.sum_exp_tempered;
    zts += wt * (p.sum_exp_tempered_shifted + shift / t * p.sum_exp_tempered);
  }
  TokenStats st;
  for (const VocabShardPartial& p : shards)
    if (p.argmax >= 0 && p.max_logit == scale.max_logit) {
      st.argmax = p.argmax;
      break;
    }
  const double l2 = second_logit_of(shards);
  const double p1 = 1.0 / z, p2 = std::exp(l2 - m) / z;
  st.p_max = static_cast<float>(p1);
  st.entropy = static_cast<float>(std::log(z) - zs / z);
  st.margin = static_cast<float>(p1 - p2);

  const DrawnToken token = chosen_token(shards, sampler, scale, drawn);
  st.token = token.token;
  const double l_tok = token.logit;
  // Unfiltered rows: the sampling distribution is softmax(l / t) itself.
  st.p_token = static_cast<float>(std::exp((l_tok - m) / t) / zt);
  st.p_token_tempered = st.p_token;
  st.entropy_filtered = static_cast<float>(std::log(zt) - zts / zt);
  st.margin_filtered = static_cast<float>((1.0 - std::exp((l2 - m) / t)) / zt);
  // LLaDA's confidence: the token's share of the tokens the confidence keeps.
  st.p_token_raw = is_confidence_banned(sampler, st.token) || !(zc > 0)
                       ? 0.0f
                       : static_cast<float>(std::exp(l_tok - m) / zc);
  return st;
}

double merged_collision(std::span<const VocabShardPartial> shards) {
  const MergedScale scale = merged_scale(shards);
  double z = 0, z2 = 0;
  for (const VocabShardPartial& p : shards) {
    const double w = scale.raw(p);
    z += w * p.sum_exp;
    z2 += w * w * p.sum_exp_sq;
  }
  return z2 / (z * z);
}

}  // namespace dllm
