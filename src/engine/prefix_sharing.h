// Automatic prefix sharing: a prompt's prefill K/V, page by page, published in the KV pool under
// a hash of the tokens they depend on, so that a request with the same prompt prefix (a common
// system prompt, a few-shot preamble, a retried request) maps those pages instead of recomputing
// them.
//
// Which prefills qualify: an append into an empty cache of the prompt's first tokens at positions
// 0, 1, ... under causal or block-causal attention (every block-diffusion, WeDLM and AR prefill).
// A slot's K/V then depend only on the tokens it can see: under causal attention those up to the
// end of its page, under block-causal (block B) those up to the end of its block — so a page's key
// hashes the token chain up to its end and, when a block crosses the page end, the tokens up to
// that block's end, plus the rule. Bidirectional canvases (LLaDA, Dream, d2Cache) never qualify.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/forward_batch.h"
#include "kv/kv_cache.h"

namespace dllm {

// Rows a forward commits: append_count, or all of them.
int64_t committed_rows(const SequenceForward& fwd);
// Whether `fwd` is a prefill of `prompt` whose pages can be shared (see above).
bool is_shareable_prefill(const SequenceForward& fwd, const KvCache& cache,
                          std::span<const int32_t> prompt);

// Keys of the pages of `tokens` (a prefill's tokens at positions 0..n-1) whose K/V depend on
// `tokens` alone under `rule`, in page order.
std::vector<uint64_t> prefix_page_keys(std::span<const int32_t> tokens, const AttentionRule& rule,
                                       int32_t page_size);

// Maps the published pages of a shareable prefill's committed rows into its empty cache and
// removes those rows from the forward (never rows whose outputs are wanted). Returns the tokens
// reused; the forward is left with no rows when every one was reused.
int64_t adopt_shared_prefix(SequenceForward& fwd, KvCache& cache);

// After a shareable prefill committed: publishes its pages (`tokens`: its committed rows as
// planned, before adopt).
void publish_prefix(std::span<const int32_t> tokens, const AttentionRule& rule, KvCache& cache);

}  // namespace dllm
