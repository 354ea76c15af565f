#include "engine/prefix_sharing.h"

#include <algorithm>
#include <span>

#include "backend/forward_positions.h"

namespace dllm {

namespace {

// splitmix64's finaliser over a running state: a strong 64-bit mix of each value fed in.
uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Tokens a slot range [0, end) depends on under `rule`: up to the end of the last block.
int64_t horizon(int64_t end, const AttentionRule& rule) {
  if (rule.kind != AttentionKind::kBlockCausal) return end;
  const int64_t b = rule.block_size;
  return (end + b - 1) / b * b;
}

}  // namespace

int64_t committed_rows(const SequenceForward& fwd) {
  return fwd.append_count >= 0 ? fwd.append_count : static_cast<int64_t>(fwd.tokens.size());
}

bool is_shareable_prefill(const SequenceForward& fwd, const KvCache& cache,
                          std::span<const int32_t> prompt) {
  if (fwd.write != CacheWrite::kAppend || cache.length() != 0 || fwd.visible_slots ||
      fwd.dllm_cache || fwd.verify || fwd.retain_logits || fwd.want_attention_rows ||
      fwd.want_attention_rollout)
    return false;
  if (fwd.rule.kind != AttentionKind::kCausal && fwd.rule.kind != AttentionKind::kBlockCausal)
    return false;
  // The committed rows are the prompt's first tokens at positions 0, 1, ...; rows after them
  // (an AR step's scratch row) may be anything.
  const size_t n = static_cast<size_t>(committed_rows(fwd));
  if (n > prompt.size() || !std::equal(fwd.tokens.begin(), fwd.tokens.begin() + n, prompt.begin()))
    return false;
  return positions_from_zero(std::span(fwd.positions).first(n));
}

std::vector<uint64_t> prefix_page_keys(std::span<const int32_t> tokens, const AttentionRule& rule,
                                       int32_t page_size) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const uint64_t rule_tag =
      rule.kind == AttentionKind::kCausal ? 1 : mix(2, static_cast<uint64_t>(rule.block_size));
  std::vector<uint64_t> keys;
  uint64_t chain = 0x6a09e667f3bcc908ull;
  for (int64_t end = page_size; end <= n; end += page_size) {
    for (int64_t i = end - page_size; i < end; ++i)
      chain = mix(chain, static_cast<uint32_t>(tokens[static_cast<size_t>(i)]));
    const int64_t h = horizon(end, rule);
    if (h > n) break;
    uint64_t key = mix(chain, rule_tag);
    for (int64_t i = end; i < h; ++i) key = mix(key, static_cast<uint32_t>(tokens[size_t(i)]));
    keys.push_back(key);
  }
  return keys;
}

int64_t adopt_shared_prefix(SequenceForward& fwd, KvCache& cache) {
  KvPool& pool = cache.pool();
  const std::span<const int32_t> committed(fwd.tokens.data(),
                                           static_cast<size_t>(committed_rows(fwd)));
  std::vector<int32_t> pages;
  for (uint64_t key : prefix_page_keys(committed, fwd.rule, pool.page_size())) {
    const auto page = pool.lookup(key);
    if (!page) break;
    pages.push_back(*page);
  }
  if (pages.empty()) return 0;
  cache.adopt_prefix(pages);
  // Rows whose outputs are wanted stay in the forward (with every row after them).
  int64_t reused = cache.length();
  for (int32_t r : fwd.output_rows) reused = std::min<int64_t>(reused, r);
  cache.truncate(reused);  // the slots past it are rewritten (copy-on-write) by the forward
  const auto cut = static_cast<std::ptrdiff_t>(reused);
  fwd.tokens.erase(fwd.tokens.begin(), fwd.tokens.begin() + cut);
  fwd.positions.erase(fwd.positions.begin(), fwd.positions.begin() + cut);
  for (int32_t& r : fwd.output_rows) r -= static_cast<int32_t>(reused);
  if (fwd.append_count >= 0) fwd.append_count -= static_cast<int32_t>(reused);
  return reused;
}

void publish_prefix(std::span<const int32_t> tokens, const AttentionRule& rule, KvCache& cache) {
  const auto keys = prefix_page_keys(tokens, rule, cache.page_size());
  const auto pages = cache.pages();
  for (size_t i = 0; i < keys.size() && i < pages.size(); ++i)
    if (static_cast<int64_t>(i + 1) * cache.page_size() <= cache.length())
      cache.pool().publish(pages[i], keys[i]);
}

}  // namespace dllm
