#include "decode/full_diffusion_decoder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dllm {

namespace {

// The whole canvas, bidirectional, no cache: the reference's model(x) call.
void full_canvas_forward(const std::vector<int32_t>& x, SequenceForward& fwd) {
  fwd.cache = nullptr;
  fwd.tokens = x;
  fwd.positions.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) fwd.positions[i] = static_cast<int32_t>(i);
  fwd.rule = AttentionRule::bidirectional();
  fwd.write = CacheWrite::kNone;
}

// Final tokens: the generated prefix without masks (only grows: unmasked tokens never change).
void extend_final(const std::vector<int32_t>& x, int32_t prompt_len, int32_t mask_id,
                  std::vector<int32_t>& final_tokens) {
  size_t i = static_cast<size_t>(prompt_len) + final_tokens.size();
  while (i < x.size() && x[i] != mask_id) final_tokens.push_back(x[i++]);
}

}  // namespace

// ---------------------------------------------------------------------------------------- LLaDA

LladaDecoder::LladaDecoder(const ModelConfig& config, const DecodeParams& params,
                           const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      vocab_(config.vocab_size),
      schedule_(prompt, params.max_tokens, params.block_length, params.steps, mask_id_) {}

bool LladaDecoder::plan(SequenceForward& fwd) {
  if (schedule_.done()) return false;
  full_canvas_forward(schedule_.tokens(), fwd);
  pending_ = schedule_.pending();
  fwd.output_rows = pending_;  // positions are rows: the canvas is forwarded as is
  rng_ = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
  if (params_.cfg_scale > 0.0f) {
    fwd.want_logits = true;  // combined with the unconditional rows before sampling
  } else {
    fwd.want_stats = true;
    fwd.sampler = params_.sampler;
    fwd.rng = rng_;
  }
  ++forwards_;
  return true;
}

bool LladaDecoder::plan_step(std::vector<SequenceForward>& fwds) {
  if (!plan(fwds.at(0))) return false;
  if (params_.cfg_scale > 0.0f) {
    // The unconditional pass: the same canvas with every prompt position masked.
    SequenceForward un = fwds[0];
    std::fill(un.tokens.begin(), un.tokens.begin() + schedule_.prompt_length(), mask_id_);
    fwds.push_back(std::move(un));
  }
  return true;
}

void LladaDecoder::observe(const SequenceResult& result) {
  if (params_.cfg_scale > 0.0f)
    fail("LLaDA with classifier-free guidance needs both forwards of a step (observe_step)");
  apply(result.stats);
}

void LladaDecoder::observe_step(std::span<const SequenceResult> results) {
  if (params_.cfg_scale <= 0.0f) {
    observe(results[0]);
    return;
  }
  if (results.size() != 2) fail("LLaDA classifier-free guidance: expected 2 results");
  const std::vector<float>& cond = results[0].logits;
  const std::vector<float>& un = results[1].logits;
  const size_t v = static_cast<size_t>(vocab_);
  if (cond.size() != pending_.size() * v || un.size() != cond.size())
    fail("LLaDA classifier-free guidance: logits rows missing");
  // The reference's float32 tensor arithmetic: un + (cfg + 1) * (cond - un), one rounding per
  // operation (this file is compiled without floating-point contraction).
  const float scale = params_.cfg_scale + 1.0f;
  std::vector<float> row(v);
  std::vector<TokenStats> stats(pending_.size());
  for (size_t r = 0; r < pending_.size(); ++r) {
    for (size_t j = 0; j < v; ++j) {
      const float diff = cond[r * v + j] - un[r * v + j];
      row[j] = un[r * v + j] + scale * diff;
    }
    stats[r] = compute_token_stats(row, params_.sampler, rng_, pending_[r]);
  }
  apply(stats);
}

void LladaDecoder::apply(const std::vector<TokenStats>& stats) {
  if (stats.size() != pending_.size()) fail("LLaDA: expected ", pending_.size(), " token stats");
  std::vector<int32_t> tokens(pending_.size());
  std::vector<double> confidence(pending_.size());
  const bool random = params_.remasking == "random";
  for (size_t i = 0; i < pending_.size(); ++i) {
    tokens[i] = stats[i].token;
    confidence[i] = random ? uniform(rng_, pending_[i], RngStream::kRemask)
                           : static_cast<double>(stats[i].p_token_raw);
  }
  schedule_.apply(pending_, tokens, confidence);
  update_final();
}

void LladaDecoder::update_final() {
  extend_final(schedule_.tokens(), schedule_.prompt_length(), mask_id_, final_);
}

std::vector<int32_t> LladaDecoder::canvas() const {
  const auto& x = schedule_.tokens();
  return {x.begin() + schedule_.prompt_length(), x.end()};
}

// ---------------------------------------------------------------------------------------- Dream

DreamDecoder::DreamDecoder(const ModelConfig& config, const DecodeParams& params,
                           const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      schedule_(prompt, params.max_tokens, params.steps, mask_id_) {}

bool DreamDecoder::plan(SequenceForward& fwd) {
  if (schedule_.done()) return false;
  full_canvas_forward(schedule_.tokens(), fwd);
  rng_ = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
  pending_.clear();
  const std::vector<int32_t> masks = schedule_.masks();
  if (params_.alg == "origin") {
    // Which masks this step transfers is known before the forward: ask only for their rows.
    const float p = schedule_.transfer_probability();
    for (int32_t j : masks)
      if (uniform(rng_, j, RngStream::kRemask) < static_cast<double>(p)) pending_.push_back(j);
  } else {
    transfer_ = schedule_.transfer_count();
    if (transfer_ > 0) pending_ = masks;  // a step that unmasks nothing still costs its forward
  }
  for (int32_t j : pending_) {
    fwd.output_rows.push_back(j - 1);  // right shift: token j from the logit at j - 1
    fwd.rng_positions.push_back(j);
  }
  fwd.want_stats = true;
  fwd.sampler = params_.sampler;
  fwd.rng = rng_;
  ++forwards_;
  return true;
}

void DreamDecoder::observe(const SequenceResult& result) {
  if (result.stats.size() != pending_.size())
    fail("Dream: expected ", pending_.size(), " token stats");
  std::vector<int32_t> positions, tokens;
  if (params_.alg == "origin") {
    positions = pending_;
    for (const TokenStats& st : result.stats) tokens.push_back(st.token);
  } else if (!pending_.empty()) {
    std::vector<double> score(pending_.size());
    for (size_t i = 0; i < pending_.size(); ++i) {
      const TokenStats& st = result.stats[i];
      double conf = 0;
      if (params_.alg == "maskgit_plus") {
        conf = st.p_token;
      } else if (params_.alg == "topk_margin") {
        conf = st.margin_filtered;
      } else {
        conf = -static_cast<double>(st.entropy_filtered);  // entropy: negative entropy
      }
      if (params_.alg_temp > 0.0f) {
        // torch.multinomial(softmax(conf / alg_temp), n) without replacement == Gumbel-top-k.
        const double u = uniform(rng_, pending_[i], RngStream::kRemask);
        conf = conf / static_cast<double>(params_.alg_temp) - std::log(-std::log(u));
      }
      score[i] = conf;
    }
    for (int32_t i : top_k_indices(score, transfer_)) {
      positions.push_back(pending_[static_cast<size_t>(i)]);
      tokens.push_back(result.stats[static_cast<size_t>(i)].token);
    }
  }
  schedule_.apply(positions, tokens);
  update_final();
}

void DreamDecoder::update_final() {
  extend_final(schedule_.tokens(), schedule_.prompt_length(), mask_id_, final_);
}

std::vector<int32_t> DreamDecoder::canvas() const {
  const auto& x = schedule_.tokens();
  return {x.begin() + schedule_.prompt_length(), x.end()};
}

}  // namespace dllm
