// Attention rules of the forward contract (DESIGN.md): which keys a query may see.
//
// Keys come from two sources: the sequence's visible cache entries (each with the logical position
// it was written at) and the queries' own fresh K/V. Columns of a custom mask are ordered
// [visible cache entries | queries].
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dllm {

enum class AttentionKind {
  kCausal,         // cache entries visible; among queries, j <= i in physical order
  kBidirectional,  // everything visible
  kBlockCausal,    // visible iff block(pos_key) <= block(pos_query), blocks aligned to absolute
                   // positions
  kCustom,         // explicit boolean mask [n_queries, n_visible + n_queries]
};

struct AttentionRule {
  AttentionKind kind = AttentionKind::kCausal;
  int64_t block_size = 0;            // kBlockCausal only
  std::vector<uint8_t> custom_mask;  // kCustom only; row-major, 1 = may attend

  static AttentionRule causal() { return {AttentionKind::kCausal, 0, {}}; }
  static AttentionRule bidirectional() { return {AttentionKind::kBidirectional, 0, {}}; }
  static AttentionRule block_causal(int64_t block) {
    return {AttentionKind::kBlockCausal, block, {}};
  }
  static AttentionRule custom(std::vector<uint8_t> mask) {
    return {AttentionKind::kCustom, 0, std::move(mask)};
  }

  // Parses the CLI spelling: "causal", "bidirectional", "block:N".
  static AttentionRule parse(const std::string& text);
  std::string to_string() const;
};

// Fills visible[q * (n_cache + n_q) + k] for every query q and key k, keys ordered
// [cache entries | queries]. cache_positions / query_positions are logical positions.
void build_visibility(const AttentionRule& rule, std::span<const int32_t> cache_positions,
                      std::span<const int32_t> query_positions, std::vector<uint8_t>& visible);

}  // namespace dllm
