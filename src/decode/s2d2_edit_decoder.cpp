#include "decode/s2d2_edit_decoder.h"

#include <algorithm>

#include "core/error.h"
#include "decode/block_schedule.h"
#include "decode/token_editing_rule.h"

namespace dllm {

S2d2EditDecoder::S2d2EditDecoder(const ModelConfig& config, const DecodeParams& params,
                                 const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      router_(params.s2d2) {
  const int32_t b = params_.block_length;
  x_ = aligned_block_canvas(prompt, params_.max_tokens, b, mask_id_);
  num_blocks_ = static_cast<int32_t>(x_.size()) / b;
  block_ = prompt_len_ / b;  // the prompt's last partial block is decoded with the first tokens
  phase_ = block_ > 0 ? Phase::kPrefill : Phase::kDraft;
}

bool S2d2EditDecoder::block_has_mask() const {
  return aligned_block_has_mask(x_, block_, params_.block_length, mask_id_);
}

bool S2d2EditDecoder::plan(SequenceForward& fwd) {
  const int32_t b = params_.block_length, s = block_start();
  if (phase_ == Phase::kDone) return false;
  const auto index = static_cast<uint32_t>(forwards_++);
  if (phase_ == Phase::kPrefill || phase_ == Phase::kCommit) {
    // Prefill: the prompt's whole blocks; commit: the finished block. Both append their K/V.
    const int32_t begin = phase_ == Phase::kPrefill ? 0 : s;
    const int32_t end = phase_ == Phase::kPrefill ? s : s + b;
    fwd.rule = AttentionRule::block_causal(b);
    fwd.tokens.assign(x_.begin() + begin, x_.begin() + end);
    for (int32_t i = begin; i < end; ++i) fwd.positions.push_back(i);
    fwd.write = CacheWrite::kAppend;
    return true;
  }
  fwd.write = CacheWrite::kNone;
  fwd.sampler = params_.sampler;
  if (phase_ == Phase::kVerify) {
    verify_key_ = RngKey{params_.seed, params_.sequence_id, index};
    plan_aligned_verify(fwd, std::span<const int32_t>(x_).subspan(static_cast<size_t>(s)), s, span_,
                        mask_id_, verify_key_);
    ++spec_.verify_calls;
    return true;
  }
  plan_draft(fwd, index);
  return true;
}

void S2d2EditDecoder::plan_draft(SequenceForward& fwd, uint32_t index) {
  const int32_t b = params_.block_length, s = block_start();
  had_mask_ = block_has_mask();
  if (!had_mask_) {
    ++post_steps_;
    ++post_forwards_;
  }
  fwd.rule = AttentionRule::block_causal(b);
  fwd.tokens.assign(x_.begin() + s, x_.begin() + s + b);
  for (int32_t i = 0; i < b; ++i) fwd.positions.push_back(s + i);
  rows_.clear();
  for (int32_t i = std::max(0, prompt_len_ - s); i < b; ++i) {  // prompt rows are never edited
    rows_.push_back(i);
    fwd.output_rows.push_back(i);
  }
  fwd.want_stats = true;
  fwd.rng = RngKey{params_.seed, params_.sequence_id, index};
  // Only a block with masks can verify: the backend keeps the rows for the residual then.
  fwd.retain_logits = had_mask_;
  fwd.want_span_stats = had_mask_ && params_.s2d2.needs_span_distributions();
}

void S2d2EditDecoder::observe(const SequenceResult& result) {
  switch (phase_) {
    case Phase::kPrefill:
      phase_ = Phase::kDraft;
      return;
    case Phase::kCommit:
      ++block_;
      post_steps_ = 0;
      unmasked_in_block_ = 0;
      phase_ = block_ < num_blocks_ ? Phase::kDraft : Phase::kDone;
      return;
    case Phase::kDraft:
      observe_draft(result);
      return;
    case Phase::kVerify: {
      const int32_t s = block_start();
      phase_ = Phase::kDraft;
      end_step(accept_span(result.verify_rows, span_, params_.s2d2.gamma, verify_key_, s,
                           std::span<int32_t>(x_).subspan(static_cast<size_t>(s)), spec_));
      return;
    }
    case Phase::kDone:
      return;
  }
}

void S2d2EditDecoder::observe_draft(const SequenceResult& result) {
  const int32_t s = block_start();
  std::vector<int32_t> current;
  for (int32_t i : rows_) current.push_back(x_[static_cast<size_t>(s + i)]);
  // T2T first, applied now: the verify forward's first half is the edited block, as the
  // reference's input_seq_ver_first (edits touch tokens only, never C's masks).
  const auto edit = token_edits(current, result.stats, mask_id_, params_.editing_threshold);
  for (size_t r : edit) x_[static_cast<size_t>(s + rows_[r])] = result.stats[r].token;
  edits_ += static_cast<int64_t>(edit.size());
  edited_ = !edit.empty();
  if (!had_mask_) {
    router_.no_span();
    end_step(0);
    return;
  }
  if (router_.decide(draft_span(current, result))) {
    phase_ = Phase::kVerify;
    return;
  }
  // Not verified: the reference's fallback asks for min(num_to_transfer = 1, masks) tokens by
  // the threshold rule, which is M2T.
  const auto fill = mask_fills(current, result.stats, mask_id_, params_.threshold);
  for (size_t r : fill) x_[static_cast<size_t>(s + rows_[r])] = result.stats[r].token;
  end_step(static_cast<int32_t>(fill.size()));
}

SpanContext S2d2EditDecoder::draft_span(const std::vector<int32_t>& current,
                                        const SequenceResult& result) {
  const bool distributions = params_.s2d2.needs_span_distributions();
  if (distributions && result.span_stats.size() < rows_.size())
    fail("s2d2: the draft forward returned ", result.span_stats.size(), " span statistics for ",
         rows_.size(), " rows");
  span_ = {};
  SpanContext ctx;
  for (size_t r = 0; r < rows_.size(); ++r) {  // rows_ are consecutive block offsets
    if (current[r] != mask_id_) {
      if (!span_.offsets.empty()) break;
      continue;
    }
    span_.offsets.push_back(rows_[r]);
    span_.tokens.push_back(result.stats[r].token);
    span_.kept_rows.push_back(static_cast<int32_t>(r));
    if (distributions) ctx.span_rows.push_back(result.span_stats[r]);
  }
  for (size_t r = 0; r < rows_.size(); ++r)
    if (current[r] == mask_id_ && result.stats[r].p_token > params_.threshold)
      ++ctx.high_confidence;
  ctx.span_length = static_cast<int32_t>(span_.offsets.size());
  ctx.block_length = params_.block_length;
  ctx.unmasked_in_block = unmasked_in_block_;
  return ctx;
}

void S2d2EditDecoder::end_step(int32_t unmasked) {
  unmasked_in_block_ += unmasked;
  router_.record(unmasked);
  // The block ends when a forward without masks edited nothing, or when the next forward would
  // exceed the post-mask budget (the reference checks that before forwarding).
  const bool finished =
      (!had_mask_ && !edited_) || (!block_has_mask() && post_steps_ + 1 > params_.max_post_steps);
  if (!finished) return;
  const size_t end = static_cast<size_t>(block_start() + params_.block_length);
  for (size_t i = static_cast<size_t>(prompt_len_) + final_.size(); i < end; ++i)
    final_.push_back(x_[i]);
  phase_ = Phase::kCommit;
}

std::vector<int32_t> S2d2EditDecoder::canvas() const {
  const int32_t end =
      std::min<int32_t>(static_cast<int32_t>(x_.size()), (block_ + 1) * params_.block_length);
  return {x_.begin() + prompt_len_, x_.begin() + std::max(prompt_len_, end)};
}

std::vector<DecoderMetric> S2d2EditDecoder::metrics(int64_t) const {
  return {{"edits", static_cast<double>(edits_), true},
          {"post_edit_forwards", static_cast<double>(post_forwards_), true}};
}

}  // namespace dllm
