#include "decode/s2d2_span.h"

#include "core/error.h"
#include "decode/s2d2_verify.h"

namespace dllm {

SpanVerify span_verify(const DraftSpan& span, int32_t block_start, const RngKey& key) {
  SpanVerify v;
  v.draft_rows = span.kept_rows;
  v.draft_tokens = span.tokens;
  for (int32_t offset : span.offsets)
    v.residual_u.push_back(residual_uniform(key, block_start + offset));
  return v;
}

void plan_aligned_verify(SequenceForward& fwd, std::span<const int32_t> block, int32_t block_start,
                         const DraftSpan& span, int32_t mask_id, const RngKey& key) {
  // Rows and keys past the end of C cannot reach C's [MASK] rows, so the first half stops there.
  const int32_t end = span.offsets.back() + 1;
  fwd.tokens.assign(block.begin(), block.begin() + end);
  for (size_t t = 0; t < span.offsets.size(); ++t)
    fwd.tokens[static_cast<size_t>(span.offsets[t])] = span.tokens[t];
  for (int32_t i = 0; i < end; ++i) fwd.positions.push_back(block_start + i);
  for (size_t t = 0; t < span.offsets.size(); ++t) {
    fwd.tokens.push_back(mask_id);
    fwd.positions.push_back(block_start + span.offsets[t]);
    fwd.output_rows.push_back(end + static_cast<int32_t>(t));
  }
  fwd.rule = AttentionRule::custom(verifier_mask_2l(block_start, end, span.offsets));
  fwd.verify = span_verify(span, block_start, key);
  fwd.want_stats = wants_verifier_stats(fwd.sampler);
}

bool wants_verifier_stats(const SamplerConfig& sampler) {
  return sampler.greedy();
}

int32_t accept_span(std::span<const VerifyRow> rows, const DraftSpan& span, double gamma,
                    const RngKey& key, int32_t block_start, std::span<int32_t> block,
                    SpeculationStats& stats) {
  if (rows.size() != span.offsets.size())
    fail("s2d2: the verify forward returned ", rows.size(), " rows for a span of ",
         span.offsets.size());
  int32_t decided = 0;
  for (size_t t = 0; t < rows.size(); ++t) {
    const size_t i = static_cast<size_t>(span.offsets[t]);
    ++decided;
    const double ratio = acceptance_ratio(rows[t].q_token, rows[t].p_token, gamma);
    if (accept_uniform(key, block_start + span.offsets[t]) < ratio) {
      block[i] = span.tokens[t];
      ++stats.accepted;
      continue;
    }
    block[i] = rows[t].residual_token;
    ++stats.rejected;
    break;
  }
  return decided;
}

}  // namespace dllm
