#include "decode/ar_decoder.h"

namespace dllm {

ArDecoder::ArDecoder(const ModelConfig& config, const DecodeParams& params,
                     const std::vector<int32_t>& prompt)
    : params_(params),
      mask_id_(static_cast<int32_t>(config.mask_token_id)),
      shifted_(config.shifted_logits),
      prompt_(prompt) {}

bool ArDecoder::plan(SequenceForward& fwd) {
  if (static_cast<int32_t>(final_.size()) >= params_.max_tokens) return false;
  // Tokens not yet in the cache: the whole prompt first, then the last generated token.
  const bool first = final_.empty();
  const int32_t start = first ? 0 : static_cast<int32_t>(prompt_.size() + final_.size()) - 1;
  if (first) {
    fwd.tokens = prompt_;
  } else {
    fwd.tokens = {final_.back()};
  }
  for (size_t i = 0; i < fwd.tokens.size(); ++i)
    fwd.positions.push_back(start + static_cast<int32_t>(i));
  const int32_t next_pos = start + static_cast<int32_t>(fwd.tokens.size());
  fwd.rule = AttentionRule::causal();
  fwd.write = CacheWrite::kAppend;
  if (shifted_) {
    fwd.output_rows = {static_cast<int32_t>(fwd.tokens.size()) - 1};
  } else {
    fwd.append_count = static_cast<int32_t>(fwd.tokens.size());
    fwd.tokens.push_back(mask_id_);
    fwd.positions.push_back(next_pos);
    fwd.output_rows = {static_cast<int32_t>(fwd.tokens.size()) - 1};
  }
  fwd.rng_positions = {next_pos};
  fwd.want_stats = true;
  fwd.sampler = params_.sampler;
  fwd.rng = RngKey{params_.seed, params_.sequence_id, static_cast<uint32_t>(forwards_)};
  ++forwards_;
  return true;
}

void ArDecoder::observe(const SequenceResult& result) {
  final_.push_back(result.stats[0].token);
}

}  // namespace dllm
