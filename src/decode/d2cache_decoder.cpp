#include "decode/d2cache_decoder.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "decode/d2cache_selection.h"
#include "decode/full_diffusion_schedule.h"

namespace dllm {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace

D2CacheDecoder::D2CacheDecoder(const ModelConfig& config, const DecodeParams& params,
                               const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      shift_(config.family == "dream" ? 1 : 0),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      gen_len_(params.max_tokens),
      block_len_(params.block_length),
      steps_per_block_(params.steps / (params.max_tokens / params.block_length)),
      total_(static_cast<int64_t>(prompt.size()) + params.max_tokens) {
  x_ = prompt;
  x_.resize(static_cast<size_t>(total_), mask_id_);
}

bool D2CacheDecoder::block_has_masks(int32_t block) const {
  return range_has_mask(x_, prompt_len_ + block * block_len_, block_len_, mask_id_);
}

bool D2CacheDecoder::plan(SequenceForward& fwd) {
  const int32_t blocks = gen_len_ / block_len_;
  // vanilla.py: each block runs its steps, leaving early once it has no masks.
  while (block_ < blocks && (step_in_block_ >= steps_per_block_ || !block_has_masks(block_))) {
    ++block_;
    step_in_block_ = 0;
  }
  if (block_ >= blocks) return false;

  rows_.clear();
  if (!cache_filled_ || params_.d2c_select_all) {
    for (int32_t r = 0; r < total_; ++r) rows_.push_back(r);
  } else {
    rows_ = next_rows_;
  }
  fwd.tokens.clear();
  fwd.positions.clear();
  for (int32_t r : rows_) {
    fwd.tokens.push_back(x_[static_cast<size_t>(r)]);
    fwd.positions.push_back(r);
  }
  fwd.rule = AttentionRule::bidirectional();
  if (!cache_filled_) {
    fwd.write = CacheWrite::kAppend;  // step 0: the whole canvas enters the cache
  } else {
    fwd.write = CacheWrite::kAtSlots;  // refresh the selected rows in place
    fwd.write_slots = rows_;
  }
  fwd.want_attention_rollout = !params_.d2c_select_all;

  // Stats for every still-masked generated position whose logit row is computed.
  out_gen_.clear();
  for (size_t i = 0; i < rows_.size(); ++i) {
    const int32_t g = rows_[i] + shift_ - prompt_len_;
    if (g < 0 || g >= gen_len_ || x_[static_cast<size_t>(prompt_len_ + g)] != mask_id_) continue;
    fwd.output_rows.push_back(static_cast<int32_t>(i));
    fwd.rng_positions.push_back(prompt_len_ + g);
    out_gen_.push_back(g);
  }
  fwd.want_stats = true;
  fwd.sampler = params_.sampler;
  fwd.rng = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
  ++forwards_;
  return true;
}

void D2CacheDecoder::observe(const SequenceResult& result) {
  if (result.stats.size() != out_gen_.size())
    fail("d2cache: expected ", out_gen_.size(), " token stats");
  cache_filled_ = true;
  const size_t g_len = static_cast<size_t>(gen_len_);
  std::vector<double> conf(g_len, kNegInf);
  std::vector<int32_t> tok(g_len, -1);
  for (size_t i = 0; i < out_gen_.size(); ++i) {
    const size_t g = static_cast<size_t>(out_gen_[i]);
    conf[g] = result.stats[i].p_token;  // greedy: p(argmax), [MASK] excluded
    tok[g] = result.stats[i].token;
  }

  // Certainty-prior decoding over the decodable masks of the current block.
  std::vector<bool> known(g_len);
  for (size_t g = 0; g < g_len; ++g)
    known[g] = x_[static_cast<size_t>(prompt_len_) + g] != mask_id_;
  const std::vector<double> density = d2cache::certainty_density(known, params_.d2c_sigma);
  std::vector<double> score(g_len, kNegInf);
  int32_t candidates = 0;
  for (int32_t g = block_ * block_len_; g < (block_ + 1) * block_len_; ++g) {
    const size_t gi = static_cast<size_t>(g);
    if (conf[gi] == kNegInf) continue;
    score[gi] = conf[gi] * density[gi];
    ++candidates;
  }
  const int32_t step_count = [&] {
    const int32_t base = block_len_ / steps_per_block_, rem = block_len_ % steps_per_block_;
    return base + (step_in_block_ < rem ? 1 : 0);
  }();
  std::vector<int32_t> decoded;
  if (params_.threshold >= 0) {
    for (size_t g = 0; g < g_len; ++g)
      if (score[g] != kNegInf && score[g] >= static_cast<double>(params_.threshold))
        decoded.push_back(static_cast<int32_t>(g));
  }
  if (static_cast<int32_t>(decoded.size()) < step_count) {
    std::vector<double> s = score;
    decoded.clear();
    for (int32_t g : top_k_indices(s, std::min(candidates, step_count)))
      if (score[static_cast<size_t>(g)] != kNegInf) decoded.push_back(g);
  }
  for (int32_t g : decoded) x_[static_cast<size_t>(prompt_len_ + g)] = tok[static_cast<size_t>(g)];
  ++step_in_block_;

  // Final tokens: the generated prefix without masks.
  size_t i = static_cast<size_t>(prompt_len_) + final_.size();
  while (i < x_.size() && x_[i] != mask_id_) final_.push_back(x_[i++]);

  if (!params_.d2c_select_all) select_next_rows(result, decoded);
}

void D2CacheDecoder::select_next_rows(const SequenceResult& result,
                                      const std::vector<int32_t>& decoded) {
  const int32_t g_len = gen_len_, p_len = prompt_len_;
  // The confidence cache: step 0's confidences; the paper keeps it current with every fresh
  // confidence, the reference never updates it (--d2c-frozen-conf, method-specs §4.6 quirk 1).
  if (!have_conf_cache_) {
    conf_cache_.assign(static_cast<size_t>(g_len), kNegInf);
    for (size_t i = 0; i < out_gen_.size(); ++i)
      conf_cache_[static_cast<size_t>(out_gen_[i])] = result.stats[i].p_token;
    have_conf_cache_ = true;
  } else if (!params_.d2c_frozen_conf) {
    for (size_t i = 0; i < out_gen_.size(); ++i)
      conf_cache_[static_cast<size_t>(out_gen_[i])] = result.stats[i].p_token;
  }

  // Stage 1: top-k masks by conf_cache x density in the search window, current block first.
  std::vector<bool> remaining(static_cast<size_t>(g_len)), known(static_cast<size_t>(g_len));
  for (int32_t g = 0; g < g_len; ++g) {
    remaining[static_cast<size_t>(g)] = x_[static_cast<size_t>(p_len + g)] == mask_id_;
    known[static_cast<size_t>(g)] = !remaining[static_cast<size_t>(g)];
  }
  const int32_t k = params_.d2c_k;
  int32_t end0 = g_len - 1, count = 0;
  for (int32_t g = 0; g < g_len; ++g) {
    count += remaining[static_cast<size_t>(g)] ? 1 : 0;
    if (count >= k) {
      end0 = g;
      break;
    }
  }
  const int32_t search_end = (end0 / block_len_ + 1) * block_len_ - 1;
  // block_ is the block decoded by this step (plan() moves on lazily).
  const int32_t block_lo = block_ * block_len_, block_hi = block_lo + block_len_;
  const std::vector<double> density = d2cache::certainty_density(known, params_.d2c_sigma);
  std::vector<double> s(static_cast<size_t>(g_len));
  double bias = kNegInf;
  for (int32_t g = 0; g < g_len; ++g) {
    s[static_cast<size_t>(g)] =
        conf_cache_[static_cast<size_t>(g)] * density[static_cast<size_t>(g)];
    bias = std::max(bias, s[static_cast<size_t>(g)]);
  }
  std::vector<double> cand(static_cast<size_t>(g_len), kNegInf);
  int32_t n_cand = 0;
  for (int32_t g = block_lo; g <= search_end && g < g_len; ++g) {
    if (!remaining[static_cast<size_t>(g)]) continue;
    cand[static_cast<size_t>(g)] = s[static_cast<size_t>(g)] + (g < block_hi ? bias : 0.0);
    ++n_cand;
  }
  std::vector<bool> selected(static_cast<size_t>(g_len), false);
  for (int32_t g : top_k_indices(cand, std::min({k, g_len, n_cand})))
    selected[static_cast<size_t>(g)] = true;

  std::vector<bool> q(static_cast<size_t>(total_), false);
  for (int32_t g = 0; g < g_len; ++g) {
    // Dream: the logit of mask g comes from row g - 1, so that row is recomputed.
    const int32_t src = g + shift_;
    if (src < g_len && selected[static_cast<size_t>(src)]) q[static_cast<size_t>(p_len + g)] = true;
  }
  for (int32_t g : decoded) q[static_cast<size_t>(p_len + g)] = true;  // MASK -> token changed

  // Stage 2: nucleus of the rollout importance over the tokens not selected yet.
  // The importance comes from the backend (rollout_importance over this forward's rows).
  const std::vector<double>& importance = result.attention_importance;
  if (importance.size() != q.size())
    fail("d2cache: attention rollout over ", importance.size(), " slots for a canvas of ",
         q.size());
  std::vector<bool> allowed(q.size());
  for (size_t t = 0; t < q.size(); ++t) allowed[t] = !q[t];
  const std::vector<bool> nucleus =
      d2cache::nucleus_select(importance, static_cast<double>(params_.d2c_p), allowed);
  for (size_t t = 0; t < q.size(); ++t) q[t] = q[t] || nucleus[t];
  // d2cache.py: the last prompt row is selected exactly when gen position 0 was (an assignment,
  // after the nucleus).
  if (shift_ && p_len > 0) q[static_cast<size_t>(p_len - 1)] = selected[0];
  d2cache::inflate(q, params_.d2c_inflate);

  next_rows_.clear();
  for (int32_t t = 0; t < total_; ++t)
    if (q[static_cast<size_t>(t)]) next_rows_.push_back(t);
  if (next_rows_.empty()) {
    // Nothing left to compute (every token known and nothing important): keep one row so the
    // next forward is valid; it only happens when no step follows.
    next_rows_.push_back(static_cast<int32_t>(total_ - 1));
  }
}

std::vector<int32_t> D2CacheDecoder::canvas() const {
  return {x_.begin() + prompt_len_, x_.end()};
}

}  // namespace dllm
