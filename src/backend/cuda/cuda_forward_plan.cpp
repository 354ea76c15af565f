// prepare: a CUDA forward laid out on the host (cuda_forward_plan.h). Every check that can fail
// runs here, before anything is written to the pool.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/sparse_select.h"
#include "backend/forward_positions.h"
#include "backend/sequence_slots.h"
#include "core/error.h"

namespace dllm::cuda_backend {

namespace {

// Device TokenStats are enough for greedy decoding without filters (greedy Gumbel-max is the
// argmax too) and without confidence-banned tokens.
bool device_stats_suffice(const SamplerConfig& s) {
  return s.greedy() && s.top_k == 0 && !(s.top_p < 1.0f) &&
         s.banned_tokens.size() <= cuda::kMaxBanned && s.confidence_banned_tokens.empty();
}

bool wants_rows(const SequenceForward& s) {
  return s.want_attention_rows || s.want_attention_rollout;
}

// Custom masks: when every query sees the whole cache (S2D2's verifier), only the query columns
// are sent — the kernel then treats cache tiles as fully visible, and far fewer bytes move.
void plan_mask(const SequenceForward& seq, PlannedSequence& p, size_t index) {
  const int64_t n = p.rows, n_keys = p.n_keys;
  if (seq.rule.custom_mask.size() != static_cast<size_t>(n * n_keys))
    fail("forward request ", index, ": custom attention mask has ", seq.rule.custom_mask.size(),
         " entries, expected ", n, " x ", n_keys, " (queries x [visible cache | queries])");
  const int64_t nc = n_keys - n;
  bool cache_visible = true;
  for (int64_t r = 0; r < n && cache_visible; ++r) {
    const auto row = seq.rule.custom_mask.begin() + r * n_keys;
    cache_visible = std::all_of(row, row + nc, [](uint8_t v) { return v != 0; });
  }
  p.mask_queries_only = cache_visible;
  if (!cache_visible) {
    p.mask = seq.rule.custom_mask;
    return;
  }
  for (int64_t r = 0; r < n; ++r) {
    const auto row = seq.rule.custom_mask.begin() + r * n_keys + nc;
    p.mask.insert(p.mask.end(), row, row + n);
  }
}

cuda::MaskKind mask_kind(AttentionKind k) {
  switch (k) {
    case AttentionKind::kCausal:
      return cuda::MaskKind::kCausal;
    case AttentionKind::kBidirectional:
      return cuda::MaskKind::kBidirectional;
    case AttentionKind::kBlockCausal:
      return cuda::MaskKind::kBlockCausal;
    case AttentionKind::kCustom:
      return cuda::MaskKind::kCustom;
  }
  return cuda::MaskKind::kCausal;
}

// Capacities of captured graphs: n rounded up to a power of two (at least 64), or for large n to
// a multiple of an eighth of that power (little waste, few distinct graphs).
int64_t bucket(int64_t n) {
  int64_t b = 64;
  while (b < n) b *= 2;
  if (b <= 512) return b;
  const int64_t step = b / 16;
  return (n + step - 1) / step * step;
}

// Rows of a captured graph: exact up to 64 (a lone sequence's step keeps its GEMM shapes), then
// multiples of 32 up to 512, then buckets of a sixteenth of a power of two.
int64_t row_bucket(int64_t n) {
  if (n <= 64) return n;
  if (n <= 512) return (n + 31) / 32 * 32;
  return bucket(n);
}

}  // namespace

bool host_rows_needed(const SequenceForward& s) {
  const bool verify_on_host = s.verify && !(s.sampler.top_k == 0 && !(s.sampler.top_p < 1.0f) &&
                                            s.sampler.banned_tokens.size() <= cuda::kMaxBanned);
  return s.want_logits || (s.want_stats && !device_stats_suffice(s.sampler)) || verify_on_host;
}

ForwardPlan CudaBackend::prepare(std::span<const SequenceForward> batch) {
  const ModelConfig& c = config_;
  ForwardPlan plan;
  for (size_t i = 0; i < batch.size(); ++i) {
    validate_forward(c, batch[i], i);
    if (vocab_slice_ && (batch[i].verify || batch[i].retain_logits))
      fail("forward request ", i, ": a vocabulary-parallel rank keeps no draft rows (internal)");
    if (batch[i].want_layer_qk)
      fail("forward request ", i, ": want_layer_qk (pattern search) runs on the CPU backend");
    plan.any_input_embeddings = plan.any_input_embeddings || batch[i].input_embeddings;
    plan.any_routing = plan.any_routing || (batch[i].want_routing && c.moe.num_experts > 0);
  }
  if (plan.any_routing) plan.routing.resize(batch.size());
  plan.seqs.resize(batch.size());
  for (size_t si = 0; si < batch.size(); ++si) {
    const SequenceForward& seq = batch[si];
    PlannedSequence& p = plan.seqs[si];
    p.seq = &seq;
    p.rows = static_cast<int64_t>(seq.tokens.size());
    if (seq.state && !dynamic_cast<CudaMethodState*>(seq.state))
      fail("forward request ", si, ": the method state was not created by the CUDA backend");
    if (wants_rows(seq) && seq.rule.kind != AttentionKind::kBidirectional)
      fail("forward request ", si,
           ": attention rows (d2Cache rollout) need bidirectional attention on the CUDA backend");
    if (seq.verify)
      for (int32_t d : seq.verify->draft_rows)
        if (d >= static_cast<CudaMethodState*>(seq.state)->kept_rows)
          fail("forward request ", si, ": verify: draft row ", d, " but the draft forward kept ",
               static_cast<CudaMethodState*>(seq.state)->kept_rows, " rows");
    if (seq.cache) {
      p.cache = seq.cache;
    } else {
      p.owned = std::make_unique<KvCache>(kv_pool());
      p.cache = p.owned.get();
    }
    if (seq.dllm_cache) {  // the canvas is the cache: query i is slot i, every slot a key
      p.reuse = plan.any_reuse = true;
      p.reuse_first = p.cache->length() == 0;
      auto& st = static_cast<CudaMethodState&>(*seq.state);
      const size_t feats = static_cast<size_t>(c.num_layers * p.rows * c.hidden_size);
      if (!p.reuse_first && st.attn_out.size() != feats)
        fail("forward request ", si, ": the cache was not filled by a dLLM-Cache forward of ",
             p.rows, " tokens");
      if (p.reuse_first) {
        st.attn_out.resize(feats, "dLLM-Cache attention outputs");
        st.ffn_out.resize(feats, "dLLM-Cache FFN outputs");
      }
      p.query_slots.resize(static_cast<size_t>(p.rows));
      for (int32_t i = 0; i < p.rows; ++i) p.query_slots[static_cast<size_t>(i)] = i;
      prepare_cache_writes(*p.cache, p.query_slots, p.rows);
      p.n_keys = p.rows;  // the whole canvas, slots [0, rows)
    } else if (!seq.visible_slots && seq.write != CacheWrite::kAtSlots &&
               seq.rule.kind != AttentionKind::kCustom && !wants_rows(seq)) {
      // The common case, without listing the range: keys are the committed slots [0, length),
      // then the queries' own fresh slots right after them.
      p.query_slots = query_slots_of(seq, p.cache);
      p.n_keys = p.cache->length() + p.rows;
      p.cold_prefill = p.cache->length() == 0 && positions_from_zero(seq.positions);
      if (seq.sparse) {  // validate_forward() sent sparse requests here
        plan_sparse(p, si);
        plan.any_sparse_select = plan.any_sparse_select || p.sparse_select;
        plan.any_quest = plan.any_quest || p.quest_select;
      }
      if (seq.sparse_prefill) {
        plan_sparse_prefill(p);
        plan.any_sparse_prefill = plan.any_sparse_prefill || !p.sparse_prefill_layers.empty();
      }
      prepare_cache_writes(*p.cache, p.query_slots, p.n_keys);
    } else {
      const SequenceSlots slots = plan_sequence_slots(seq, seq.cache ? p.cache : nullptr, si);
      prepare_cache_writes(*p.cache, slots.query_slots, slots.needed_capacity);
      p.query_slots = slots.query_slots;
      p.n_keys = static_cast<int64_t>(slots.visible_slots.size() + slots.query_slots.size());
      if (!slots.contiguous) {
        p.key_slots = slots.visible_slots;
        p.key_slots.insert(p.key_slots.end(), slots.query_slots.begin(), slots.query_slots.end());
      }
      if (seq.rule.kind == AttentionKind::kCustom) plan_mask(seq, p, si);
      if (wants_rows(seq)) {
        for (const auto* list : {&slots.visible_slots, &slots.query_slots})
          for (int32_t s : *list) p.attention_width = std::max<int64_t>(p.attention_width, s + 1);
        if (static_cast<size_t>(p.n_keys) > cuda::attention_rows_max_keys())
          fail("forward request ", si, ": attention rows over ", p.n_keys,
               " keys exceed the CUDA kernel's ", cuda::attention_rows_max_keys());
        p.attn_rows_at = plan.attn_rows_total;
        p.attn_rows_count = static_cast<size_t>(c.num_layers * p.rows * p.attention_width);
        plan.attn_rows_total += p.attn_rows_count;
      }
    }
    p.host_rows = host_rows_needed(seq);
    p.row_offset = plan.total_rows;
    p.out_offset = plan.total_out;
    plan.total_rows += p.rows;
    plan.total_out += static_cast<int64_t>(seq.output_rows.size());
  }
  stage(plan);
  return plan;
}

void CudaBackend::stage(ForwardPlan& plan) {
  std::vector<int32_t>& ints = plan.ints;
  // Input embeddings are copied from host memory each forward: never part of a captured graph.
  plan.graphable = graphs_enabled_ && !profiling_ && !plan.any_reuse && plan.attn_rows_total == 0 &&
                   !plan.any_input_embeddings && !plan.any_sparse_select && !plan.any_quest &&
                   !plan.any_sparse_prefill && !plan.any_routing;
  const int64_t T = plan.total_rows;
  const int64_t Tp = plan.padded_rows = plan.graphable ? row_bucket(T) : T;
  // tokens | positions | pool slots, each padded_rows long (padding: token 0, position 0, the
  // junk slot).
  ints.assign(static_cast<size_t>(3 * Tp), 0);
  plan.positions_at = static_cast<size_t>(Tp);
  plan.slots_at = static_cast<size_t>(2 * Tp);
  std::fill(ints.begin() + 2 * Tp + T, ints.end(), static_cast<int32_t>(junk_slot()));
  for (const PlannedSequence& p : plan.seqs) {
    const auto at = static_cast<std::ptrdiff_t>(p.row_offset);
    std::copy(p.seq->tokens.begin(), p.seq->tokens.end(), ints.begin() + at);
    std::copy(p.seq->positions.begin(), p.seq->positions.end(), ints.begin() + Tp + at);
    for (int64_t i = 0; i < p.rows; ++i)
      ints[static_cast<size_t>(2 * Tp + p.row_offset + i)] =
          static_cast<int32_t>(p.cache->physical_slot(p.query_slots[static_cast<size_t>(i)]));
  }
  plan.out_rows_at = ints.size();
  for (const PlannedSequence& p : plan.seqs)
    for (int32_t r : p.seq->output_rows) ints.push_back(static_cast<int32_t>(p.row_offset + r));
  plan.padded_out = plan.graphable && plan.total_out > 0 ? bucket(plan.total_out) : plan.total_out;
  ints.resize(plan.out_rows_at + static_cast<size_t>(plan.padded_out), 0);
  stage_token_stats(plan);

  // Batched paged attention over every sequence's rows (a dLLM-Cache layer re-plans its rows).
  for (PlannedSequence& p : plan.seqs) {
    cuda::AttentionBatchSeq a;
    a.n_q = static_cast<int>(p.rows);
    a.n_keys = static_cast<int>(p.n_keys);
    a.key_slots = p.key_slots;
    a.page_table = p.cache->pages();
    a.kind = p.reuse ? cuda::MaskKind::kBidirectional : mask_kind(p.seq->rule.kind);
    a.block_size = static_cast<int>(p.seq->rule.block_size);
    a.custom_mask = p.mask;
    a.custom_mask_queries_only = p.mask_queries_only;
    // MAGE / SparseD selecting: the exact pass hands each row's prefix-only LSE over (§1.6),
    // unless a dLLM-Cache sequence makes the layers re-plan (the selection's own pass then).
    const bool hand_over = p.sparse_select && !plan.any_reuse && mage_lse_handover_;
    // A few selection rows: their raw prefix scores instead, for score sums without a pass over
    // K; MAGE's rows then take their prefix-only LSE from those scores too
    // (mage_prefix_ml_from_scores), SparseD's full softmax still from the hand-over.
    const int64_t group = config_.num_heads / config_.num_kv_heads;
    p.select_from_scores = hand_over && mage_score_handover_ &&
                           static_cast<int64_t>(p.select_rows.size()) * group <=
                               cuda::batch_layout::kMaxHandedScoreRows;
    if (p.select_from_scores) a.score_queries = p.select_rows;
    a.prefix_lse = hand_over && (!p.select_from_scores || p.sparse_full_softmax);
    a.keys_at_positions = p.cold_prefill && !p.reuse;
    plan.attention_seqs.push_back(a);
  }
  plan.attention = cuda::attention_batch_plan(plan.attention_seqs, attention_shape(), ints);
  plan.capacity = plan.attention.need;
  stage_sparse(plan);  // the sparse layers' plans (capacity: the largest need of all)

  // d2Cache's attention rows (a per-sequence kernel): the keys' physical slots, then their
  // logical slots, the output columns.
  for (PlannedSequence& p : plan.seqs) {
    if (p.attention_width == 0) continue;
    const SequenceSlots slots = plan_sequence_slots(*p.seq, p.cache, 0);
    std::vector<int32_t> logical = slots.visible_slots;
    logical.insert(logical.end(), slots.query_slots.begin(), slots.query_slots.end());
    p.keys_at = ints.size();
    for (int32_t s : logical) ints.push_back(static_cast<int32_t>(p.cache->physical_slot(s)));
    p.logical_keys_at = ints.size();
    ints.insert(ints.end(), logical.begin(), logical.end());
  }

  // Any batch without dLLM-Cache's per-layer rows or d2Cache's attention rows replays a captured
  // CUDA graph for its shape: rows, output rows and the attention grid's capacity (rounded up to
  // powers of two so that one graph serves a growing context); everything else is data in the
  // staging, copied at the start of the step.
  // A kernel kind without work items keeps a capacity of 0 (its launch is left out; the graph
  // key holds the capacities): a decoding step's empty mma.sync and prefill grids cost ~2 µs of
  // launch a layer each, and an mma.sync launch rules out the Hopper kernel's in-kernel merge.
  auto items = [&](int n) { return n == 0 || !plan.graphable ? n : static_cast<int>(bucket(n)); };
  if (plan.graphable) {
    plan.capacity.mma_items = items(plan.capacity.mma_items);
    plan.capacity.sm90_items = items(plan.capacity.sm90_items);
    plan.capacity.sm90_ws_items = items(plan.capacity.sm90_ws_items);
    plan.capacity.partial_rows = bucket(plan.capacity.partial_rows);
    ints.resize(static_cast<size_t>(bucket(static_cast<int64_t>(ints.size()))), 0);
  }
  for (LayerAttention& la : plan.layer_attentions) {
    la.capacity = plan.capacity;
    la.capacity.mma_items = items(la.plan.need.mma_items);
    la.capacity.sm90_items = items(la.plan.need.sm90_items);
    la.capacity.sm90_ws_items = items(la.plan.need.sm90_ws_items);
    la.capacity.ws_block_causal = la.plan.need.ws_block_causal;
    la.capacity.combine = la.plan.need.combine;
  }
}

// Which output rows get device statistics, with which banned list (sequences with the same list
// share one entry).
void CudaBackend::stage_token_stats(ForwardPlan& plan) {
  std::vector<int32_t>& ints = plan.ints;
  plan.row_ban_at = ints.size();
  ints.resize(ints.size() + static_cast<size_t>(plan.padded_out), -1);
  std::vector<std::vector<int32_t>> lists;
  for (const PlannedSequence& p : plan.seqs) {
    const SequenceForward& seq = *p.seq;
    if (!seq.want_stats || p.host_rows || seq.output_rows.empty()) continue;
    auto it = std::find(lists.begin(), lists.end(), seq.sampler.banned_tokens);
    if (it == lists.end()) it = lists.insert(lists.end(), seq.sampler.banned_tokens);
    std::fill_n(ints.begin() + static_cast<std::ptrdiff_t>(plan.row_ban_at + p.out_offset),
                seq.output_rows.size(), static_cast<int32_t>(it - lists.begin()));
  }
  plan.bans_at = ints.size();
  for (const auto& list : lists) {
    const size_t at = ints.size();
    ints.resize(at + cuda::kBannedInts, 0);
    std::copy(list.begin(), list.end(), ints.begin() + static_cast<std::ptrdiff_t>(at));
    ints[at + cuda::kMaxBanned] = static_cast<int32_t>(list.size());
  }
}

cuda::AttentionBatchShape CudaBackend::attention_shape() {
  cuda::AttentionBatchShape s;
  s.heads = static_cast<int>(config_.num_heads);
  s.kv_heads = static_cast<int>(config_.num_kv_heads);
  s.head_dim = static_cast<int>(config_.head_dim);
  s.page_size = kv_pool().page_size();
  s.pool_slots = pool_slots_;
  s.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  return s;
}

}  // namespace dllm::cuda_backend
