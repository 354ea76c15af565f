#include <set>

#include "backend/backend.h"
#include "backend/forward_positions.h"
#include "core/error.h"

namespace dllm {
namespace {

void validate_sparse_step(const ModelConfig& config, const SequenceForward& seq,
                          const std::string& where) {
  const SparseStep& sp = *seq.sparse;
  if (!seq.cache || !seq.state)
    fail(where, "sparse attention needs the sequence's cache and method state");
  if (seq.visible_slots || seq.write == CacheWrite::kAtSlots || seq.dllm_cache)
    fail(where,
         "sparse attention reads the committed cache as its prefix (no visible slot "
         "list, no write at slots, no dLLM-Cache)");
  if (seq.want_attention_rows || seq.want_attention_rollout)
    fail(where, "sparse attention does not return attention rows");
  if (sp.k < 1) fail(where, "sparse k must be positive (got ", sp.k, ")");
  if (sp.exact_layers < 0 || sp.exact_layers > config.num_layers)
    fail(where, "sparse exact layers must be in [0, ", config.num_layers, "] (got ",
         sp.exact_layers, ")");
  if (sp.page_size < 1) fail(where, "sparse page size must be positive (got ", sp.page_size, ")");
  if (sp.select_queries < 0)
    fail(where, "sparse select queries must be >= 0 (got ", sp.select_queries, ")");
}

void validate_sparse_prefill(const SequenceForward& seq, const std::string& where) {
  const SparsePrefillRequest& sp = *seq.sparse_prefill;
  if (!sp.config) fail(where, "sparse prefill without a config");
  if (seq.rule.kind != AttentionKind::kCausal && seq.rule.kind != AttentionKind::kBlockCausal)
    fail(where, "sparse prefill needs the causal or block-causal rule (got ", seq.rule.to_string(),
         ")");
  // The map and span describe the whole prompt; a forward may cover a prefix of it (block
  // families prefill floor(P / B) * B tokens), so the backend clips them to its tokens.
  const size_t n = seq.tokens.size();
  if (!sp.modality.empty() && sp.modality.size() < n)
    fail(where, "sparse prefill: ", sp.modality.size(), " modalities for ", n, " tokens");
  if (sp.vision_begin < 0 || sp.vision_end < sp.vision_begin)
    fail(where, "sparse prefill: vision span [", sp.vision_begin, ", ", sp.vision_end,
         ") must satisfy 0 <= begin <= end");
  if (seq.sparse || seq.dllm_cache || seq.want_attention_rows || seq.want_attention_rollout)
    fail(where,
         "sparse prefill does not combine with sparse decoding attention, dLLM-Cache or "
         "attention rows");
}

}  // namespace

void validate_forward(const ModelConfig& config, const SequenceForward& seq, size_t index) {
  const std::string where = "forward request " + std::to_string(index) + ": ";
  const size_t n = seq.tokens.size();
  if (n == 0) fail(where, "no query tokens");
  if (seq.positions.size() != n)
    fail(where, seq.positions.size(), " positions for ", n,
         " tokens (they must have the same length)");
  for (size_t i = 0; i < n; ++i) {
    if (seq.tokens[i] < 0 || seq.tokens[i] >= config.vocab_size)
      fail(where, "token id ", seq.tokens[i], " at index ", i, " is outside the vocabulary (size ",
           config.vocab_size, ")");
    if (seq.positions[i] < 0)
      fail(where, "position ", seq.positions[i], " at index ", i, " is negative");
  }
  if (!seq.cache) {
    if (seq.write != CacheWrite::kNone) fail(where, "a cache write needs a cache");
    if (seq.visible_slots && !seq.visible_slots->empty())
      fail(where, "visible cache slots given without a cache");
  } else if (seq.visible_slots) {
    std::set<int32_t> seen;
    for (int32_t s : *seq.visible_slots) {
      if (s < 0 || s >= seq.cache->capacity())
        fail(where, "visible slot ", s, " is outside the cache");
      if (!seen.insert(s).second) fail(where, "visible slot ", s, " is listed twice");
    }
  }
  if (seq.write == CacheWrite::kAtSlots) {
    if (seq.write_slots.size() != n)
      fail(where, seq.write_slots.size(), " write slots for ", n, " tokens");
    std::set<int32_t> seen;
    for (int32_t s : seq.write_slots) {
      if (s < 0) fail(where, "write slot ", s, " is negative");
      if (!seen.insert(s).second) fail(where, "write slot ", s, " is listed twice");
    }
  } else if (!seq.write_slots.empty()) {
    fail(where, "write slots given but the cache write policy is not 'at slots'");
  }
  if (seq.append_count != -1 && (seq.write != CacheWrite::kAppend || seq.append_count < 0 ||
                                 static_cast<size_t>(seq.append_count) > n))
    fail(where, "append_count ", seq.append_count, " needs an append write and at most ", n,
         " queries");
  if (seq.dllm_cache) {
    const int64_t p_len = seq.dllm_cache->prompt_length;
    if (!seq.cache || !seq.state)
      fail(where, "dLLM-Cache needs the sequence's cache and method state");
    if (p_len <= 0 || p_len >= static_cast<int64_t>(n))
      fail(where, "dLLM-Cache prompt length ", p_len, " for a canvas of ", n);
    if (!positions_from_zero(seq.positions))
      fail(where, "dLLM-Cache forwards the whole canvas at positions 0..n-1");
    if (seq.write != CacheWrite::kNone)
      fail(where, "dLLM-Cache manages its cache itself (write must be none)");
    const int64_t len = seq.cache->length();
    if (len != 0 && len != static_cast<int64_t>(n))
      fail(where, "dLLM-Cache canvas of ", n, " tokens over a cache of ", len);
  }
  if (seq.sparse) validate_sparse_step(config, seq, where);
  if (seq.sparse_prefill) validate_sparse_prefill(seq, where);
  if (seq.want_layer_qk && seq.dllm_cache)
    fail(where, "want_layer_qk does not combine with dLLM-Cache (it recomputes a subset of rows)");
  if (seq.want_routing && seq.dllm_cache)
    fail(where, "want_routing does not combine with dLLM-Cache (it recomputes a subset of rows)");
  if (seq.want_span_stats && !seq.want_stats)
    fail(where, "want_span_stats needs want_stats (the statistics are of each row's token)");
  if ((seq.retain_logits || seq.verify) && !seq.state)
    fail(where,
         "retain_logits and verify need the sequence's method state (it keeps the draft rows)");
  if (seq.verify) {
    const SpanVerify& v = *seq.verify;
    const size_t m = seq.output_rows.size();
    if (v.draft_rows.size() != m || v.draft_tokens.size() != m || v.residual_u.size() != m)
      fail(where, "verify: ", v.draft_rows.size(), " draft rows, ", v.draft_tokens.size(),
           " draft tokens and ", v.residual_u.size(), " uniforms for ", m, " output rows");
    for (size_t i = 0; i < m; ++i) {
      if (v.draft_tokens[i] < 0 || v.draft_tokens[i] >= config.vocab_size)
        fail(where, "verify: draft token ", v.draft_tokens[i], " is outside the vocabulary");
      if (v.draft_rows[i] < 0) fail(where, "verify: draft row ", v.draft_rows[i], " is negative");
      if (!(v.residual_u[i] >= 0.0 && v.residual_u[i] < 1.0))
        fail(where, "verify: residual uniform ", v.residual_u[i], " is outside [0, 1)");
    }
  }
  if (const InputEmbeddings* e = seq.input_embeddings.get()) {
    if (e->dim != config.hidden_size)
      fail(where, "input embeddings are ", e->dim, " wide, the model's hidden size is ",
           config.hidden_size);
    for (int32_t r : e->row_of_position)
      if (r >= 0 && (static_cast<int64_t>(r) + 1) * e->dim > static_cast<int64_t>(e->rows.size()))
        fail(where, "input embedding row ", r, " is outside the ", e->rows.size() / e->dim,
             " rows given");
  }
  if (!seq.rng_positions.empty() && seq.rng_positions.size() != seq.output_rows.size())
    fail(where, seq.rng_positions.size(), " rng positions for ", seq.output_rows.size(),
         " output rows");
  if (seq.want_stats) seq.sampler.validate();
  if (seq.rule.kind == AttentionKind::kBlockCausal && seq.rule.block_size <= 0)
    fail(where, "block-causal attention needs a positive block size");
  for (int32_t r : seq.output_rows)
    if (r < 0 || static_cast<size_t>(r) >= n)
      fail(where, "output row ", r, " is outside the ", n, " queries");
}

}  // namespace dllm
