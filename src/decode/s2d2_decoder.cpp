#include "decode/s2d2_decoder.h"

#include <algorithm>

#include "core/error.h"
#include "decode/block_schedule.h"
#include "decode/s2d2_span.h"
#include "decode/s2d2_verify.h"

namespace dllm {

S2d2Decoder::S2d2Decoder(const ModelConfig& config, const DecodeParams& params,
                         const std::vector<int32_t>& prompt)
    : params_(params),
      shifted_(config.family == "fast_dllm_v2"),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      x_(prompt),
      router_(params.s2d2) {
  const int32_t b = params_.block_length;
  if (shifted_) {
    if (prompt_len_ >= b) {
      phase_ = Phase::kPrefill;
    } else {
      open_block();
    }
    return;
  }
  num_blocks_ = (prompt_len_ + params_.max_tokens + b - 1) / b;
  x_.resize(static_cast<size_t>(num_blocks_ * b), mask_id_);
  schedule_ = transfer_schedule(b, params_.steps);
  block_ = prompt_len_ / b;
  phase_ = block_ > 0 ? Phase::kPrefill : Phase::kDraft;
}

int64_t S2d2Decoder::cache_capacity() const {
  if (shifted_) return prompt_len_ + params_.max_tokens + 2 * params_.block_length;
  return static_cast<int64_t>(x_.size());
}

int32_t S2d2Decoder::block_start() const {
  return shifted_ ? cached_ : block_ * params_.block_length;
}

bool S2d2Decoder::block_has_mask() const {
  const auto begin = x_.begin() + block_start();
  return std::find(begin, begin + params_.block_length, mask_id_) != begin + params_.block_length;
}

void S2d2Decoder::open_block() {
  const int32_t b = params_.block_length;
  x_.insert(x_.end(), static_cast<size_t>(b - static_cast<int32_t>(x_.size()) % b), mask_id_);
  phase_ = Phase::kDraft;
}

bool S2d2Decoder::plan(SequenceForward& fwd) {
  const int32_t b = params_.block_length;
  const S2d2Params& sp = params_.s2d2;
  // Forwards that write the cache: block-causal, or causal under cache_ver (§5.4).
  const AttentionRule commit_rule =
      sp.cache_ver ? AttentionRule::causal() : AttentionRule::block_causal(b);
  if (phase_ == Phase::kDone) return false;
  if (phase_ == Phase::kPrefill) {
    const int32_t n = (prompt_len_ / b) * b;
    fwd.rule = commit_rule;
    fwd.tokens.assign(x_.begin(), x_.begin() + n);
    for (int32_t i = 0; i < n; ++i) fwd.positions.push_back(i);
    fwd.write = CacheWrite::kAppend;
    if (shifted_) {  // predicts position n when the prompt ends on a block boundary
      fwd.output_rows = {n - 1};
      fwd.want_stats = true;
      fwd.sampler = params_.sampler;
    }
    ++forwards_;
    return true;
  }
  const int32_t s = block_start();
  if (phase_ == Phase::kDraft && !block_has_mask()) phase_ = Phase::kCommit;
  if (phase_ == Phase::kCommit) {
    fwd.rule = commit_rule;
    fwd.tokens.assign(x_.begin() + s, x_.begin() + s + b);
    for (int32_t i = 0; i < b; ++i) fwd.positions.push_back(s + i);
    fwd.write = CacheWrite::kAppend;
    if (shifted_) {  // the next block's first token
      fwd.output_rows = {b - 1};
      fwd.want_stats = true;
      fwd.sampler = params_.sampler;
    }
    ++forwards_;
    return true;
  }
  fwd.write = CacheWrite::kNone;
  fwd.sampler = params_.sampler;
  if (phase_ == Phase::kVerify) {
    verify_key_ = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
    if (shifted_) {
      // The block prefix up to the end of C, C draft-filled (everything before C is decoded).
      const int32_t end = span_.offsets.back() + 1;
      fwd.tokens.assign(x_.begin() + s, x_.begin() + s + end);
      for (size_t t = 0; t < span_.offsets.size(); ++t)
        fwd.tokens[static_cast<size_t>(span_.offsets[t])] = span_.tokens[t];
      for (int32_t i = 0; i < end; ++i) fwd.positions.push_back(s + i);
      fwd.rule = AttentionRule::causal();
      for (int32_t i : span_.offsets) fwd.output_rows.push_back(i - 1);
      fwd.verify = span_verify(span_, s, verify_key_);
      fwd.want_stats = wants_verifier_stats(fwd.sampler);
    } else {
      plan_aligned_verify(fwd, std::span<const int32_t>(x_).subspan(static_cast<size_t>(s)), s,
                          span_, mask_id_, verify_key_);
    }
    ++spec_.verify_calls;
    ++forwards_;
    return true;
  }
  // Draft forward: the span rows' distributions feed the routing estimators here, and the
  // backend keeps the rows for the verify forward's residual.
  fwd.tokens.assign(x_.begin() + s, x_.begin() + s + b);
  for (int32_t i = 0; i < b; ++i) fwd.positions.push_back(s + i);
  fwd.want_span_stats = params_.s2d2.needs_span_distributions();
  fwd.retain_logits = true;
  fwd.want_stats = true;
  fwd.rng = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
  draft_.clear();
  int32_t first_mask = 0;
  while (x_[static_cast<size_t>(s + first_mask)] != mask_id_) ++first_mask;
  if (shifted_) {
    fwd.rule = AttentionRule::block_causal(b);
    const int32_t sb = params_.sub_block_length, sub = (first_mask / sb) * sb;
    for (int32_t j = sub; j < sub + sb; ++j) {
      if (x_[static_cast<size_t>(s + j)] != mask_id_) continue;
      draft_.push_back({j, -1, 0, 0});
      fwd.output_rows.push_back(std::max(j - 1, 0));
      fwd.rng_positions.push_back(s + j);
    }
  } else {
    fwd.rule = sp.draft_ver && first_mask > 0
                   ? AttentionRule::custom(draft_prefix_causal_mask(s, b, first_mask))
                   : AttentionRule::block_causal(b);
    for (int32_t i = 0; i < b; ++i)
      if (x_[static_cast<size_t>(s + i)] == mask_id_) {
        draft_.push_back({i, -1, 0, 0});
        fwd.output_rows.push_back(i);
      }
  }
  ++forwards_;
  return true;
}

void S2d2Decoder::observe(const SequenceResult& result) {
  const int32_t b = params_.block_length;
  switch (phase_) {
    case Phase::kPrefill:
    case Phase::kCommit:
      if (shifted_) {
        cached_ = phase_ == Phase::kPrefill ? (prompt_len_ / b) * b : cached_ + b;
        // The reference takes the argmax here whatever the temperature.
        if (phase_ == Phase::kCommit || prompt_len_ % b == 0) x_.push_back(result.stats[0].argmax);
        open_block();
        update_final();
      } else if (phase_ == Phase::kPrefill) {
        phase_ = Phase::kDraft;
      } else {
        ++block_;
        step_ = 0;
        phase_ = block_ < num_blocks_ ? Phase::kDraft : Phase::kDone;
      }
      if (phase_ == Phase::kDraft) decoded_in_block_ = 0;
      return;
    case Phase::kDraft:
      observe_draft(result);
      return;
    case Phase::kVerify:
      observe_verify(result);
      return;
    case Phase::kDone:
      return;
  }
}

void S2d2Decoder::observe_draft(const SequenceResult& result) {
  const bool greedy = params_.sampler.greedy();
  for (size_t r = 0; r < draft_.size(); ++r) {
    const TokenStats& st = result.stats[r];
    draft_[r].token = st.token;
    draft_[r].p = st.p_token;
    if (shifted_) {  // Fast-dLLM v2: greedy compares softmax(logits)[argmax], sampling p_token
      draft_[r].confidence = greedy ? st.p_token_tempered : st.p_token;
    } else {
      draft_[r].confidence = tempered_confidence(params_) ? st.p_token_tempered : st.p_token;
    }
  }
  // C: the first contiguous run of masks (draft_ is in increasing offset order), so the span's
  // kept rows are the first ones.
  span_ = {};
  SpanContext ctx;
  for (size_t r = 0; r < draft_.size(); ++r) {
    if (r > 0 && draft_[r].offset != draft_[r - 1].offset + 1) break;
    span_.offsets.push_back(draft_[r].offset);
    span_.tokens.push_back(draft_[r].token);
    span_.kept_rows.push_back(static_cast<int32_t>(r));
  }
  const size_t n_span = span_.offsets.size();
  ctx.span_length = static_cast<int32_t>(n_span);
  if (params_.s2d2.needs_span_distributions()) {
    if (result.span_stats.size() < n_span)
      fail("s2d2: the draft forward returned ", result.span_stats.size(),
           " span statistics for a span of ", n_span);
    ctx.span_rows.assign(result.span_stats.begin(),
                         result.span_stats.begin() + static_cast<std::ptrdiff_t>(n_span));
  }
  for (const Draft& d : draft_)
    if ((shifted_ ? d.confidence : d.p) > params_.threshold) ++ctx.high_confidence;
  ctx.block_length = params_.block_length;
  ctx.unmasked_in_block = decoded_in_block_;
  if (router_.decide(ctx)) {
    phase_ = Phase::kVerify;
    return;
  }
  if (!shifted_) {
    finish_step(0);
    return;
  }
  // Fast-dLLM v2's own rule: every mask above the threshold, and always the most confident.
  const int32_t s = block_start();
  size_t best = 0;
  int32_t decoded = 0;
  for (size_t r = 0; r < draft_.size(); ++r) {
    if (draft_[r].confidence > draft_[best].confidence) best = r;
    if (draft_[r].confidence > params_.threshold) {
      x_[static_cast<size_t>(s + draft_[r].offset)] = draft_[r].token;
      ++decoded;
    }
  }
  if (!(draft_[best].confidence > params_.threshold)) ++decoded;
  x_[static_cast<size_t>(s + draft_[best].offset)] = draft_[best].token;
  decoded_in_block_ += decoded;
  router_.record(decoded);
  update_final();
}

void S2d2Decoder::observe_verify(const SequenceResult& result) {
  const int32_t s = block_start();
  const int32_t decoded =
      accept_span(result.verify_rows, span_, params_.s2d2.gamma, verify_key_, s,
                  std::span<int32_t>(x_).subspan(static_cast<size_t>(s)), spec_);
  phase_ = Phase::kDraft;
  if (shifted_) {
    decoded_in_block_ += decoded;
    router_.record(decoded);
    update_final();
    return;
  }
  finish_step(decoded);
}

void S2d2Decoder::finish_step(int32_t decoded) {
  const int32_t b = params_.block_length, s = block_start();
  std::vector<float> confidence(static_cast<size_t>(b), 0.0f);
  std::vector<bool> masked(static_cast<size_t>(b), false);
  std::vector<int32_t> sampled(static_cast<size_t>(b), mask_id_);
  int32_t masks_at_draft = static_cast<int32_t>(draft_.size());
  for (const Draft& d : draft_) {
    const size_t i = static_cast<size_t>(d.offset);
    masked[i] = x_[static_cast<size_t>(s) + i] == mask_id_;  // still a mask after verification
    confidence[i] = d.confidence;
    sampled[i] = d.token;
  }
  // The reference's min_k = min(num_transfer_tokens[step], masks at the draft).
  const int32_t k = std::min(
      schedule_[static_cast<size_t>(std::min<int32_t>(step_, params_.steps - 1))], masks_at_draft);
  if (decoded < k) {
    const auto picks =
        select_unmask(params_.remasking, confidence, masked, k - decoded, params_.threshold);
    for (int32_t i : picks) x_[static_cast<size_t>(s + i)] = sampled[static_cast<size_t>(i)];
    decoded += static_cast<int32_t>(picks.size());
  }
  decoded_in_block_ += decoded;
  router_.record(decoded);
  ++step_;
  update_final();
}

void S2d2Decoder::update_final() {
  size_t i = static_cast<size_t>(prompt_len_) + final_.size();
  while (i < x_.size() && x_[i] != mask_id_) final_.push_back(x_[i++]);
}

std::vector<int32_t> S2d2Decoder::canvas() const {
  if (shifted_) return {x_.begin() + prompt_len_, x_.end()};
  const int32_t end =
      std::min<int32_t>(static_cast<int32_t>(x_.size()), (block_ + 1) * params_.block_length);
  return {x_.begin() + prompt_len_, x_.begin() + std::max(prompt_len_, end)};
}

}  // namespace dllm
