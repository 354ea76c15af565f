// A CUDA forward laid out on the host before anything runs ("prepare"): where each sequence's
// rows sit in the batch, which pool slots its queries write and its keys read, and every small
// integer array the kernels need, packed into one staging vector copied with one memcpy.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/forward_batch.h"

namespace dllm::cuda_backend {

struct PlannedSequence {
  const SequenceForward* seq = nullptr;
  KvCache* cache = nullptr;
  std::unique_ptr<KvCache> owned;    // cache-less requests get a scratch cache from the pool
  int64_t row_offset = 0, rows = 0;  // its rows in the batch
  int64_t out_offset = 0;            // its first output row among the batch's output rows
  std::vector<int32_t> query_slots;  // logical slot of each query's fresh K/V
  // Keys as logical slots, [visible cache entries | the queries' own]; empty when they are the
  // range [0, n_keys) (the common case: attention reads them through the page table alone).
  std::vector<int32_t> key_slots;
  int64_t n_keys = 0;
  // A cold prefill: nothing cached before it and positions 0..rows-1, so key j sits at position j
  // (the attention skips the tiles past a row block's last visible key, the sparse prefill
  // applies).
  bool cold_prefill = false;
  // Custom masks: the query columns only when every query sees the whole cache.
  std::vector<uint8_t> mask;
  bool mask_queries_only = false;
  // want_attention_rows / rollout (per-sequence kernel): staging offsets of the keys' physical
  // slots and of their logical slots (the output columns).
  size_t keys_at = 0, logical_keys_at = 0;
  bool reuse = false;           // dLLM-Cache: per-layer reuse of kept outputs
  bool reuse_first = false;     // ... and this forward fills the empty cache
  bool host_rows = false;       // its logits rows go to the host (filters, want_logits, verify)
  int64_t attention_width = 0;  // want_attention_rows / rollout: 1 + the largest key slot
  size_t attn_rows_at = 0, attn_rows_count = 0;  // its rows in the attention-rows buffer
  // Sparse attention (cuda_sparse.cpp). Selecting: MAGE's selection runs in layers >=
  // sparse_first_layer over the prefix [0, sparse_prefix) (rows: its selection rows, staged at
  // select_rows_at; the prefix's page table at prefix_pages_at) into sparse_sets_out.
  // Attending: layers >= sparse_first_layer read sparse_keys keys per KV head through the
  // stored sets (cache pages staged at sparse_pages_at).
  // Quest (quest_select): every sparse layer selects sparse_k / quest_page pages from this
  // forward's rows on the main stream right before its attention, which reads them.
  bool sparse_select = false, sparse_attend = false, quest_select = false;
  bool sparse_full_softmax = false;  // SparseD: the rows' softmax over every key they see
  int64_t quest_page = 0;
  int64_t sparse_first_layer = 0, sparse_prefix = 0, sparse_k = 0, sparse_keys = 0;
  std::vector<int32_t> select_rows;
  size_t select_rows_at = 0, prefix_pages_at = 0, sparse_pages_at = 0;
  int64_t select_q_row = 0;            // its first row among the selecting sequences' (sel_q_)
  int32_t* sparse_sets_out = nullptr;  // the state's sets when kept; else null: scratch
  size_t scratch_sets_at = 0;          // a selection not kept: its sets in sel_sets_ from here
  // MAGE / SparseD: every sparse layer's score sums ([layers - sparse_first_layer, kv_heads,
  // sparse_prefix] in sel_layer_scores_ from here), ranked by one top-k after the last layer
  // (its workspace in sel_layer_topk_ from select_topk_at).
  size_t select_scores_at = 0, select_topk_at = 0;
  // The selection stream its score sums and top-k run on, in one stream's order (stage_sparse:
  // its place among the batch's selecting sequences, modulo the lanes; 0, the forward's stream,
  // without DLLM_MAGE_SIDE_STREAM), or -1 where no layer selects (exact layers cover the model).
  int select_lane = -1;
  // Its score sums read the raw prefix scores of its few selection rows, which the exact pass
  // hands over (AttentionBatchSeq::score_queries), instead of K — on the score stream (not a
  // lane: select_lane is then 0 or -1), from the layer's slot of sel_prefix_scores_.
  bool select_from_scores = false;
  // MMInference sparse prefill (cuda_sparse_prefill.cpp): per layer, 1 where the sparse prefill
  // kernel attends its rows (a cold prefill, some head of the layer's patterns sparse); empty
  // when the request has no sparse prefill or the forward is not a cold prefill.
  std::vector<uint8_t> sparse_prefill_layers;
  bool sparse_prefill_at(int64_t layer) const;
};

// One batched-attention plan of the step: layers whose sequences attend alike share one (every
// layer shares plan 0 without sparse attention; sparse sequences' exact layers differ from their
// sparse ones). Sparse sequences' key lists are filled on the device from the table at
// sparse_table_at (sparse_keys:: entries, sparse_count of them) at the start of each layer.
// Sequences whose rows the sparse prefill kernel attends in a layer are in its plan as
// attended_elsewhere.
struct LayerAttention {
  cuda::AttentionBatchPlan plan;
  // Its calls' capacity: the step's (rows, partials, prefix buffers) with this plan's own work
  // items, rounded as the step's are. A kernel kind without items here is not launched in these
  // layers (MAGE's steps 2..T launched the exact layers' warp-specialised grid, empty, in every
  // sparse layer: +0.15 ms a step).
  cuda::AttentionBatchCapacity capacity;
  size_t sparse_table_at = 0;
  int sparse_count = 0;
};

struct ForwardPlan {
  std::vector<PlannedSequence> seqs;
  int64_t total_rows = 0, total_out = 0;
  // Rows the layers run over: total_rows, or for a captured graph total_rows rounded up, the
  // extra rows embedding token 0 and writing their K/V to the pool's junk slot (nobody reads
  // it), so that batches a few rows apart replay one graph.
  int64_t padded_rows = 0;
  // Output rows the LM head runs over: total_out, or for a captured graph total_out rounded up
  // (the extra rows repeat row 0 and are ignored), so that steps whose sequences want a few more
  // or fewer rows replay the same graph.
  int64_t padded_out = 0;
  // Staging: tokens | positions | physical query slots | output rows (batch row indices) |
  // per sequence its key count and key slots.
  std::vector<int32_t> ints;
  size_t positions_at = 0, slots_at = 0, out_rows_at = 0;
  // Device token statistics: each output row's banned-list index (-1: none), and the lists.
  size_t row_ban_at = 0, bans_at = 0;
  bool any_reuse = false;
  bool any_input_embeddings = false;  // a sequence replaces token embeddings (vision prompts)
  // Batched paged attention: its plan region in the staging (all rows of every sequence), the
  // grid capacity it runs with, and the per-sequence template a dLLM-Cache layer re-plans from.
  std::vector<cuda::AttentionBatchSeq> attention_seqs;
  cuda::AttentionBatchPlan attention;
  cuda::AttentionBatchCapacity capacity;
  size_t attn_rows_total = 0;
  // Sparse attention: the plans of the layers (empty: plan `attention` for every layer) and each
  // layer's; whether some sequence selects (not graphable: its launches depend on the prefix).
  std::vector<LayerAttention> layer_attentions;
  std::vector<int32_t> attention_of_layer;
  bool any_sparse_select = false, any_quest = false;
  bool any_sparse_prefill = false;  // some sequence's layers run the sparse prefill kernel
  int64_t select_q_rows = 0;        // the selecting sequences' rows
  // Some sequence wants its MoE routing (SequenceForward::want_routing): each MoE layer's is read
  // back as it runs (keep_routing), so the forward runs eagerly; per sequence, what it kept.
  bool any_routing = false;
  std::vector<SequenceResult> routing;
  size_t scratch_sets = 0;                    // sel_sets_ ints of the selections not kept
  size_t select_scores = 0, select_topk = 0;  // sel_layer_scores_ floats, sel_layer_topk_ ints
  int select_lanes = 0;                       // the selection lanes its sequences use
  // Top-k of the handed-over selections in runs of layers during the forward
  // (CudaBackend::enqueue_layer_run_top_k), decided once per plan.
  bool top_k_in_runs = false;
  bool graphable = false;  // one captured CUDA graph can replay it (see cuda_forward.cpp)
};

// The rows one layer recomputes: every row of the batch, or — with a dLLM-Cache sequence in
// the batch — a compacted list (other sequences' rows all, its own selected ones).
struct LayerRows {
  bool all = true;
  int64_t count = 0;
  const int32_t* rows = nullptr;       // device: batch row of each computed row (null: all)
  const int32_t* positions = nullptr;  // device: per computed row
  const int32_t* slots = nullptr;      // device: physical pool slot per computed row
  std::vector<int64_t> first, size;    // per sequence: its computed rows [first, first + size)
  std::vector<std::vector<int32_t>> seq_rows;  // per sequence: which of its rows (reuse only)
};

// Whether a sequence's logits rows must come to the host: full logits wanted, sampling the
// device statistics cannot do (filters, confidence bans), or S2D2 verification with filters.
bool host_rows_needed(const SequenceForward& seq);

}  // namespace dllm::cuda_backend
