#include "attention/attention_rule.h"

#include "core/error.h"

namespace dllm {

AttentionRule AttentionRule::parse(const std::string& text) {
  if (text == "causal") return causal();
  if (text == "bidirectional") return bidirectional();
  if (text.rfind("block:", 0) == 0) {
    const std::string n = text.substr(6);
    size_t used = 0;
    long long b = 0;
    try {
      b = std::stoll(n, &used);
    } catch (...) {
      used = 0;
    }
    if (used != n.size() || n.empty() || b <= 0)
      fail("attention rule '", text, "': block size must be a positive integer (e.g. block:4)");
    return block_causal(b);
  }
  fail("unknown attention rule '", text, "' (expected causal, bidirectional or block:N)");
}

std::string AttentionRule::to_string() const {
  switch (kind) {
    case AttentionKind::kCausal:
      return "causal";
    case AttentionKind::kBidirectional:
      return "bidirectional";
    case AttentionKind::kBlockCausal:
      return "block:" + std::to_string(block_size);
    case AttentionKind::kCustom:
      return "custom";
  }
  return "?";
}

void build_visibility(const AttentionRule& rule, std::span<const int32_t> cache_positions,
                      std::span<const int32_t> query_positions, std::vector<uint8_t>& visible) {
  const size_t nc = cache_positions.size();
  const size_t nq = query_positions.size();
  const size_t nk = nc + nq;
  visible.assign(nq * nk, 0);
  switch (rule.kind) {
    case AttentionKind::kBidirectional:
      visible.assign(nq * nk, 1);
      return;
    case AttentionKind::kCausal:
      for (size_t q = 0; q < nq; ++q) {
        uint8_t* row = &visible[q * nk];
        for (size_t k = 0; k < nc + q + 1; ++k) row[k] = 1;
      }
      return;
    case AttentionKind::kBlockCausal: {
      if (rule.block_size <= 0) fail("block-causal attention needs a positive block size");
      const int64_t b = rule.block_size;
      for (size_t q = 0; q < nq; ++q) {
        const int64_t qb = query_positions[q] / b;
        uint8_t* row = &visible[q * nk];
        for (size_t k = 0; k < nc; ++k) row[k] = cache_positions[k] / b <= qb;
        for (size_t k = 0; k < nq; ++k) row[nc + k] = query_positions[k] / b <= qb;
      }
      return;
    }
    case AttentionKind::kCustom:
      if (rule.custom_mask.size() != nq * nk)
        fail("custom attention mask has ", rule.custom_mask.size(), " entries, expected ", nq,
             " x ", nk, " (queries x [visible cache | queries])");
      for (size_t i = 0; i < nq * nk; ++i) visible[i] = rule.custom_mask[i] != 0;
      return;
  }
}

}  // namespace dllm
