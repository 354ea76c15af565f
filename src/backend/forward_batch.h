// The forward contract (DESIGN.md): what one sequence asks of one model forward, and what it gets
// back. A decoder fills SequenceForward; a backend runs a batch of them in one forward.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "attention/attention_rule.h"
#include "attention/sparse_attention.h"
#include "attention/sparse_prefill_config.h"
#include "backend/input_embeddings.h"
#include "backend/method_state.h"
#include "decode/token_stats.h"
#include "decode/vocab_parallel_stats.h"
#include "kv/kv_cache.h"

namespace dllm {

enum class CacheWrite {
  kNone,     // fresh K/V are used by this forward only (denoising step); the cache is unchanged
  kAppend,   // fresh K/V are committed after the cache's committed slots (prefill, block commit)
  kAtSlots,  // fresh K/V overwrite the given slots (d2Cache refresh, WeDLM window)
};

// dLLM-Cache step (method-specs §6.3): the queries are the whole canvas at positions 0..n-1,
// write none (the mode manages the cache). The first forward over an empty cache computes and
// caches everything; later ones reuse per-layer attention and FFN outputs (kept in the sequence's
// MethodState) and recompute only the rows the flags and rho select — an option of the one
// forward per backend, batched with any other sequences.
struct DllmCacheStep {
  int32_t prompt_length = 0;
  bool refresh_prompt = false;
  bool refresh_response = false;
  float rho = 0.25f;  // fraction of response rows refreshed by value similarity (0: none)
};

// S2D2 verification on the backend (method-specs §5.2). The draft forward keeps its output rows'
// logits in the sequence's MethodState (SequenceForward::retain_logits); the verify forward names,
// per output row, the kept draft row, the drafted token and the residual uniform, and gets back
// q(x) and p(x) under the sampler's distribution (sampling_distribution) and a draw from
// norm((q - p)+), q itself when that mass is 0 (residual_sample): the verifier's logits rows
// never leave the device.
struct SpanVerify {
  std::vector<int32_t> draft_rows;    // per output row: index of the kept draft row
  std::vector<int32_t> draft_tokens;  // per output row: the drafted token x
  std::vector<double> residual_u;     // per output row: uniform in [0, 1) of the residual draw
};
struct VerifyRow {
  double q_token = 0, p_token = 0;  // q(x), p(x)
  int32_t residual_token = -1;      // the residual draw (used at the first rejection)
};

// What S2D2's routing estimators read of a draft row's sampling distribution (method-specs §5.3),
// computed by the backend so the row itself need not leave the device.
struct SpanRowStats {
  double norm_entropy = 0;  // H / ln V
  double margin = 0;        // top1 - top2 probability
  double collision = 0;     // sum of p^2 (Renyi-2)
  double p_token = 0;       // p of the row's token (TokenStats::token)
};

struct SequenceForward {
  // The sequence's cache; null means no cache at all (full recompute, nothing visible but the
  // queries themselves, and write must be kNone).
  KvCache* cache = nullptr;
  // The sequence's method state (Backend::create_method_state); needed by retain_logits, verify
  // and dllm_cache, which keep data between forwards.
  MethodState* state = nullptr;

  std::vector<int32_t> tokens;     // query tokens, in physical order
  std::vector<int32_t> positions;  // their logical RoPE positions (same length)
  AttentionRule rule;
  // Vision-language prompts: embeddings that replace the token embedding of the query rows at
  // the positions they cover (backend/input_embeddings.h); shared by the sequence's forwards.
  std::shared_ptr<const InputEmbeddings> input_embeddings;

  // Cache entries the queries see: a slot list, or by default the committed range [0, length).
  std::optional<std::vector<int32_t>> visible_slots;

  CacheWrite write = CacheWrite::kNone;
  std::vector<int32_t> write_slots;  // kAtSlots: one slot per query
  // kAppend: commit only the first N queries; the K/V of the rest are scratch for this forward.
  // -1 commits all. Lets one forward commit a finished block and start the next.
  int32_t append_count = -1;

  std::vector<int32_t> output_rows;  // query rows whose outputs are wanted, in the order returned
  bool want_logits = false;          // full-vocabulary logits for output_rows (tests, parity, S2D2)
  bool want_stats = false;           // TokenStats for output_rows
  // Head-averaged post-softmax attention probabilities of every query row, per layer (d2Cache's
  // attention rollout, method-specs §4.5): SequenceResult::attention_rows.
  bool want_attention_rows = false;
  // d2Cache's attention-rollout importance of every key slot (method-specs §4.5: the reverse-
  // vector product over the layers of those rows, each query at its own slot), computed by the
  // backend so the rows need not leave the device: SequenceResult::attention_importance.
  bool want_attention_rollout = false;

  std::optional<DllmCacheStep> dllm_cache;

  // Sparse attention over the cached prefix (MAGE, Quest, SparseD; attention/sparse_attention.h):
  // select index sets per (layer, KV head) into `state` and/or attend through them. Needs the
  // cache, the state, the committed range as the visible prefix, and no write at slots.
  std::optional<SparseStep> sparse;
  // MMInference / MInference sparse prefill (attention/sparse_prefill_config.h): the per-(layer,
  // query head) patterns of a prompt's prefill.
  std::shared_ptr<const SparsePrefillRequest> sparse_prefill;
  // The offline pattern search (dllm search-patterns): every layer's post-RoPE queries and keys
  // of this forward's rows, SequenceResult::layer_q / layer_k (CPU backend).
  bool want_layer_qk = false;
  // MoE layers: how this forward routed the sequence's rows (SequenceResult::routed_experts,
  // routing_gaps) — what tests need to show that two runs routed a row apart at a near-tie. The
  // CUDA backend runs such a forward without a captured graph.
  bool want_routing = false;

  // S2D2 (SpanVerify above): keep this forward's output-row logits in `state` (replacing what
  // was kept), and/or verify this forward's output rows against the kept rows.
  bool retain_logits = false;
  std::optional<SpanVerify> verify;
  // S2D2: SpanRowStats of every output row under the sampler's distribution (needs want_stats).
  bool want_span_stats = false;

  // Sampling for want_stats: the row's draw is uniform(rng, rng_positions[i], kTokenSample);
  // rng_positions defaults to the logical position of each output row. Right-shifted families
  // pass the position of the token being decided instead.
  SamplerConfig sampler;
  RngKey rng;
  std::vector<int32_t> rng_positions;
};

struct SequenceResult {
  std::vector<float> logits;      // [output_rows.size(), vocab] when want_logits
  std::vector<TokenStats> stats;  // [output_rows.size()] when want_stats
  // A tensor-parallel rank whose LM head is a slice of the vocabulary (Model::shard) gives,
  // instead of stats, each output row's partial where the device reduced its slice
  // ([output_rows.size()]), else its slice of the logits rows in `logits`
  // ([output_rows.size(), its vocabulary count]); the group merges them.
  std::vector<VocabShardPartial> vocab_partials;
  // want_attention_rows: [num_layers, tokens.size(), attention_width], row-major. Column j is the
  // key in cache slot j (for a cache-less request: query j); keys the query could not see, and
  // slots that were not keys, are 0. attention_width = 1 + the largest key slot.
  std::vector<float> attention_rows;
  int64_t attention_width = 0;
  std::vector<VerifyRow> verify_rows;    // [output_rows.size()] when verify
  std::vector<SpanRowStats> span_stats;  // [output_rows.size()] when want_span_stats
  // want_attention_rollout: [attention_width], indexed by key slot (d2cache::rollout_importance).
  std::vector<double> attention_importance;
  // sparse->want_selection: the sets selected in this forward, [num_layers * num_kv_heads]
  // (index layer * num_kv_heads + kv_head); the exact layers' entries are empty.
  std::vector<SparseSet> sparse_selection;
  // want_layer_qk: [num_layers, tokens.size(), q_dim] and [num_layers, tokens.size(), kv_dim].
  std::vector<float> layer_q, layer_k;
  // want_routing: per MoE layer in order, each row's experts in increasing id ([MoE layers,
  // tokens.size(), experts_per_token]) and its closest_routing_gap (moe_routing.h: [MoE layers,
  // tokens.size()]); empty without MoE layers.
  std::vector<int32_t> routed_experts;
  std::vector<double> routing_gaps;
};

}  // namespace dllm
