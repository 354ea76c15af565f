#include "decode/fast_dllm_v1_decoder.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "decode/full_diffusion_schedule.h"

namespace dllm {

FastDllmV1Decoder::FastDllmV1Decoder(const ModelConfig& config, const DecodeParams& params,
                                     const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      dream_(config.family == "dream"),
      dual_(params.cache == "dual"),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      block_len_(params.block_length),
      blocks_(params.max_tokens / params.block_length),
      total_(static_cast<int64_t>(prompt.size()) + params.max_tokens) {
  x_ = prompt;
  x_.resize(static_cast<size_t>(total_), mask_id_);
}

bool FastDllmV1Decoder::block_has_masks() const {
  return range_has_mask(x_, prompt_len_ + block_ * block_len_, block_len_, mask_id_);
}

bool FastDllmV1Decoder::plan(SequenceForward& fwd) {
  while (block_ < blocks_ && block_started_ && !block_has_masks() && (!dream_ || block_stepped_)) {
    ++block_;
    block_started_ = block_stepped_ = false;
  }
  if (block_ >= blocks_) return false;
  const int32_t s = prompt_len_ + block_ * block_len_, e = s + block_len_;
  const int32_t t = static_cast<int32_t>(total_);

  planned_full_ = !block_started_;
  const int32_t first = planned_full_ ? 0 : s;
  const int32_t last = planned_full_ || !dual_ ? t : e;
  for (int32_t r = first; r < last; ++r) {
    fwd.tokens.push_back(x_[static_cast<size_t>(r)]);
    fwd.positions.push_back(r);
  }
  fwd.rule = AttentionRule::bidirectional();
  if (!cache_filled_) {
    fwd.write = CacheWrite::kAppend;  // the first forward fills the whole canvas's cache
  } else {
    fwd.write = CacheWrite::kAtSlots;  // refresh these rows; the rest stay cached
    fwd.write_slots = fwd.positions;
  }

  pending_.clear();
  if (planned_full_ && dream_) {
    pending_.push_back(s);  // Dream's block start fixes only the first block position
    fwd.output_rows.push_back(s - 1);
    fwd.rng_positions.push_back(s);
  } else {
    for (int32_t j = s; j < e; ++j) {
      if (x_[static_cast<size_t>(j)] != mask_id_) continue;
      // Dream shifts logits inside the forwarded window: position j reads row j - 1, the
      // window's first position its own row (the reference's cat(logits[:1], logits[:-1])).
      const int32_t src = dream_ && j > first ? j - 1 : j;
      pending_.push_back(j);
      fwd.output_rows.push_back(src - first);
      fwd.rng_positions.push_back(j);
    }
  }
  fwd.want_stats = true;
  fwd.sampler = params_.sampler;
  fwd.rng = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
  ++forwards_;
  return true;
}

void FastDllmV1Decoder::observe(const SequenceResult& result) {
  if (result.stats.size() != pending_.size())
    fail("fastdllm: expected ", pending_.size(), " token stats");
  cache_filled_ = true;
  if (planned_full_ && dream_) {
    x_[static_cast<size_t>(pending_[0])] = result.stats[0].token;
  } else if (!pending_.empty()) {
    // Threshold rule: the most confident mask always, every other one with conf >= threshold.
    std::vector<size_t> order(pending_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return result.stats[a].p_token > result.stats[b].p_token;
    });
    for (size_t rank = 0; rank < order.size(); ++rank) {
      const TokenStats& st = result.stats[order[rank]];
      if (rank == 0 || st.p_token >= params_.threshold)
        x_[static_cast<size_t>(pending_[order[rank]])] = st.token;
    }
  }
  if (planned_full_) {
    block_started_ = true;
  } else {
    block_stepped_ = true;
  }
  size_t i = static_cast<size_t>(prompt_len_) + final_.size();
  while (i < x_.size() && x_[i] != mask_id_) final_.push_back(x_[i++]);
}

std::vector<int32_t> FastDllmV1Decoder::canvas() const {
  return {x_.begin() + prompt_len_, x_.end()};
}

}  // namespace dllm
