// The CUDA backend's class, shared by its source files (internal to src/backend/cuda):
//   cuda_backend.cpp      weights, the KV pool's storage, method state, device facts
//   cuda_forward_plan.cpp prepare: a batch laid out on the host (rows, pool slots, keys, staging)
//   cuda_forward.cpp      the one forward: prepare, run (direct or a captured graph), collect
//   cuda_layers.cpp       run: the layer list over the batch's rows, dLLM-Cache's reuse option
//   cuda_outputs.cpp      LM head and token statistics on the device; collect: results, S2D2
//   cuda_sparse.cpp       sparse attention (MAGE): planning, selection, the gathered key lists
//   cuda_sparse_prefill.cpp  MMInference sparse prefill: the pattern kernels in a cold prefill
// bf16 weights and K/V with fp32 accumulation; the residual stream stays fp32; cuBLAS runs the
// GEMMs over every sequence's rows at once, our kernels the rest (kernels.h).
#pragma once

#include <cublas_v2.h>

#include <array>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_forward_plan.h"
#include "backend/cuda/device_all_reduce.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/forward_lane.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sparse_prefill.h"
#include "backend/cuda/sparse_select.h"
#include "model/layer_desc.h"

namespace dllm::cuda_backend {

using cuda::bf16;
using cuda::DeviceBuffer;

// MoE layers (LLaDA2.x): gate_up / down hold the shared experts (empty without them); the routed
// experts' weights are stacked, [experts, 2 * expert_intermediate, hidden] and
// [experts, hidden, expert_intermediate].
struct CudaLayer {
  DeviceBuffer<bf16> attn_norm, qkv, o, mlp_norm, gate_up, down, q_norm, k_norm;
  DeviceBuffer<float> qkv_bias;
  DeviceBuffer<bf16> router, expert_gate_up, expert_down;
  DeviceBuffer<float> expert_bias;
};

// What the GPU keeps per sequence between forwards.
class CudaMethodState final : public MethodState {
 public:
  // S2D2: the draft forward's output-row logits (retain_logits), vocab each.
  DeviceBuffer<float> kept_logits;
  int64_t kept_rows = 0;
  // dLLM-Cache: per layer, the attention output (after o_proj) and the FFN output of every
  // canvas row, fp32 [layers, rows, hidden]; sized by the sequence's first dLLM-Cache forward.
  DeviceBuffer<float> attn_out, ffn_out;
  // Sparse attention (MAGE): the stored index sets, ascending logical prefix slots, int32
  // [layers, kv_heads, sparse_k] (layers below sparse_first_layer unused), selected from the
  // prefix [0, sparse_prefix); sparse_dense: that prefix had at most k keys, every key is read.
  DeviceBuffer<int32_t> sparse_sets;
  DeviceBuffer<int32_t> quest_pages;  // Quest: [layers, kv_heads, sparse_k / page], this forward's
  bool sparse_selected = false, sparse_dense = false;
  int64_t sparse_k = 0, sparse_prefix = 0, sparse_first_layer = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Model& model, int device);
  ~CudaBackend() override;

  std::string name() const override { return "cuda (" + device_name_ + ")"; }
  std::pair<int64_t, int64_t> device_memory() const override;
  int64_t activation_bytes(int64_t rows) const override;
  int64_t kv_bytes_per_slot() const override {
    return 2 * config_.num_layers * config_.kv_dim() * static_cast<int64_t>(sizeof(bf16));
  }
  std::unique_ptr<MethodState> create_method_state() override {
    return std::make_unique<CudaMethodState>();
  }
  std::vector<SequenceResult> forward(std::span<const SequenceForward> batch) override;
  void check_forward(const SequenceForward& seq, size_t index) const override;
  void fill_cache_random(KvCache& cache, int64_t n, uint64_t seed) override;
  void set_profiling(bool on) override;
  std::optional<double> profiled_moe_experts_touched() const override;
  std::vector<std::pair<std::string, double>> profile() const override { return profile_; }

  // Forwards run as two halves on the two lanes (forward_lane.h; tests).
  int64_t split_forwards() const { return split_forwards_; }

  // Tensor parallel (a rank of Model::shard): the group's sum of each block's partial output
  // rows, after the o and the down projection; rank 0 adds its partial to the residual stream,
  // the others contribute theirs alone (block_output). Unset for a whole model.
  void set_partial_sum_reduce(DeviceAllReduce* reduce, int rank, int world) {
    group_sum_ = reduce;
    lead_rank_ = rank == 0;
    group_world_ = world;
    drop_graphs();
  }

 protected:
  void allocate_kv_storage(int64_t num_slots) override;
  void copy_kv_pages(std::span<const std::pair<int32_t, int32_t>> copies) override;
  int64_t default_kv_pool_bytes() const override;

 private:
  // A slot past the pool's pages that padding rows of a captured graph write their K/V to.
  int64_t junk_slot() const { return pool_slots_; }
  // A slot no query sees under the block-causal rule (position INT32_MAX, zero K / V, never
  // written): what a gathered key list holds where its set has fewer keys than its length
  // (Quest's partial last page, which check_quest allows under that rule only).
  int64_t masked_slot() const { return pool_slots_ + 1; }
  static constexpr int64_t kExtraSlots = 2;  // the junk and the masked slot
  // The pool's K / V of one layer: [num_slots + kExtraSlots, kv_heads * head_dim].
  bf16* k_pool(int64_t layer) {
    return k_pool_.get() + layer * (pool_slots_ + kExtraSlots) * config_.kv_dim();
  }
  bf16* v_pool(int64_t layer) {
    return v_pool_.get() + layer * (pool_slots_ + kExtraSlots) * config_.kv_dim();
  }

  // prepare (cuda_forward_plan.cpp): the batch's layout, then its staging; buffers sized for it.
  ForwardPlan prepare(std::span<const SequenceForward> batch);
  void stage(ForwardPlan& plan);
  void stage_token_stats(ForwardPlan& plan);
  cuda::AttentionBatchShape attention_shape();
  // A plan's buffers on the current lane: the activations that grow with its rows
  // (ensure_row_buffers), then the lane's staging, workspaces and method scratch
  // (ensure_lane_buffers, which drops the captured graphs if anything moved).
  void ensure_buffers(const ForwardPlan& plan);
  bool ensure_row_buffers(size_t rows, size_t out_rows);
  void ensure_lane_buffers(const ForwardPlan& plan, bool moved);
  template <class F>
  void visit_row_buffers(ForwardLane& a, ForwardLane& b, F&& f) const;
  // Lane 1's row buffers as views of lane 0's past the first half's rows (a split batch).
  void view_second_half(const ForwardPlan& first, const ForwardPlan& second);
  // run: everything the GPU does for a forward — plans[i] on lane i: one plan, or a split batch's
  // two halves — in stream order (captured as one graph or run directly). The staged integers
  // are copied from each lane's pinned buffer (`pinned_ints`) or from the plan; device
  // statistics go to each lane's pinned buffer.
  void enqueue(std::span<ForwardPlan> plans, bool pinned_ints);
  void enqueue_inputs(ForwardPlan& plan, const int32_t* ints);
  void splice_input_embeddings(const ForwardPlan& plan);
  // A layer's two sub-blocks: attention (norm, q|k|v, attention, o) and FFN, each ending in the
  // group's sum. The lanes of a split batch alternate sub-blocks, so that one half's all-reduce
  // runs beside the other half's compute.
  void enqueue_attention_block(ForwardPlan& plan, int64_t layer, const LayerRows& rows);
  void enqueue_ffn_block(ForwardPlan& plan, int64_t layer, const LayerRows& rows);
  float* block_output(const LayerRows& rows);
  void sum_over_group(const LayerRows& rows);
  void enqueue_attention(ForwardPlan& plan, int64_t layer, const LayerRows& rows);
  // The FFN of `m` normed rows (xn_) into `out` (added to it when `accumulate`): dense SwiGLU, or
  // the MoE (router, dispatch, grouped GEMMs over the active experts, combine, shared experts).
  void enqueue_ffn(int64_t layer, int m, float* out, bool accumulate);
  // out (+)= the SwiGLU FFN of lane_->xn's m rows (gate_up [2 inter, h], down [h, inter]).
  void enqueue_swiglu_ffn(const cuda::bf16* gate_up, const cuda::bf16* down, int inter, int m,
                          float* out, bool accumulate, const char* gemm_op, const char* swiglu_op);
  void enqueue_moe(int64_t layer, int m, float* out, bool accumulate);  // cuda_moe_layer.cpp
  // want_routing (cuda_routing.cpp): waits for the MoE layer just enqueued and hands its routing
  // to the plan's sequences that want it.
  void keep_routing(ForwardPlan& plan, int64_t layer, const LayerRows& rows);
  // Adds one sub-block's output rows to the residual stream (dLLM-Cache: stores them first and
  // adds the kept outputs of every canvas row).
  void add_block_output(ForwardPlan& plan, int64_t layer, const LayerRows& rows, bool ffn);
  // dLLM-Cache: the rows `layer` recomputes for each sequence (may sync for V similarity).
  LayerRows layer_rows(ForwardPlan& plan, int64_t layer);
  std::vector<int32_t> rows_by_similarity(const PlannedSequence& p, int64_t layer);
  void enqueue_outputs(ForwardPlan& plan, cuda::DeviceRowSums* stats_dst);
  // Sparse attention (cuda_sparse.cpp): a sequence's checks and knobs (prepare), the per-layer
  // attention plans and the selection's staging (stage), the layer's gathered key lists (at the
  // layer's start), MAGE's selection (after the layer's K/V are written); after the forward, the
  // state takes a kept selection and the result the selected sets (want_selection).
  void plan_sparse(PlannedSequence& p, size_t index);
  void plan_quest(PlannedSequence& p, size_t index);
  void stage_sparse(ForwardPlan& plan);
  void stage_prefix_pages(PlannedSequence& p, std::vector<int32_t>& ints);
  cuda::PrefixPages prefix_keys(const PlannedSequence& p);
  int kv_page_shift();  // log2 of the pool's page size
  void enqueue_sparse_keys(const ForwardPlan& plan, int64_t layer);
  void enqueue_sparse_selection(const ForwardPlan& plan, int64_t layer);
  cuda::ScoreSumParams score_sum_params(const ForwardPlan& plan, const PlannedSequence& p,
                                        int64_t layer, float* lse);
  void enqueue_selection_lse(const ForwardPlan& plan, const PlannedSequence& p, int64_t layer,
                             const cuda::ScoreSumParams& sp, float* lse, float* workspace,
                             cudaStream_t s);
  void select_from_handed_scores(const ForwardPlan& plan, const PlannedSequence& p, int64_t layer,
                                 cudaStream_t s);
  void enqueue_handed_score_sums(const ForwardPlan& plan, int64_t layer);
  void enqueue_quest_selection(const ForwardPlan& plan, int64_t layer);
  void expand_quest_sets(const ForwardPlan& plan, int64_t layer);
  void enqueue_sparse_top_k(const PlannedSequence& p, int64_t from, int64_t to);
  void enqueue_layer_run_top_k(const ForwardPlan& plan, int64_t layer);
  void enqueue_remaining_top_k(const ForwardPlan& plan);
  bool top_k_runs_for(const ForwardPlan& plan) const;  // ForwardPlan::top_k_in_runs
  // The layers of a top-k run during the forward (top_k_runs_for; DLLM_MAGE_TOPK_LAYERS, which also
  // sets top_k_runs_forced_; 0: one call after the outputs).
  int64_t top_k_layers_ = 8;
  bool top_k_runs_forced_ = false;
  cudaStream_t selection_stream(const PlannedSequence& p);  // its select_lane's stream
  void join_sparse_selection();
  void finish_sparse(const PlannedSequence& p, SequenceResult& r);
  // MMInference sparse prefill (cuda_sparse_prefill.cpp): which layers of a cold prefill the
  // sparse kernel attends (prepare), and its plans and launches after the layer's batched
  // attention.
  void plan_sparse_prefill(PlannedSequence& p);
  void enqueue_sparse_prefill(const ForwardPlan& plan, int64_t layer);
  const cuda::AttentionBatchPlan& layer_attention(const ForwardPlan& plan, int64_t layer) const;
  // The capacity of that layer's attention call (LayerAttention::capacity).
  const cuda::AttentionBatchCapacity& layer_capacity(const ForwardPlan& plan, int64_t layer) const;
  // collect (cuda_outputs.cpp): S2D2 verification and kept rows, host copies, results.
  std::vector<SequenceResult> collect(ForwardPlan& plan,
                                      std::span<const cuda::DeviceRowSums> stats);
  // A whole-vocabulary rank's statistics, span statistics and verification of one sequence
  // (collect()): from the device's sums, or from its logits rows on the host.
  void whole_vocab_outputs(const PlannedSequence& p, std::span<const cuda::DeviceRowSums> stats,
                           std::span<const cuda::DeviceVerifyRow> device_verify,
                           std::span<const float> host_kept, SequenceResult& r) const;
  // Runs plans[i] on lane i: a graph captured for their shapes, or enqueued directly (token
  // statistics land in the lanes' pinned buffers); finish() waits for lane 0 — which waits for
  // lane 1 — and returns the current lane's statistics of `plan`.
  void launch(std::span<ForwardPlan> plans);
  std::vector<cuda::DeviceRowSums> finish(const ForwardPlan& plan);
  // A big plain batch as two halves on the two lanes at once (cuda_forward.cpp).
  size_t overlap_split(std::span<const SequenceForward> batch) const;
  // Whether batches of `rows` rows may split at all (settings and group size alone).
  bool may_split(int64_t rows) const {
    return overlap_min_rows_ > 0 && (group_world_ > 1 || overlap_whole_model_) &&
           rows >= overlap_min_rows_;
  }
  std::vector<SequenceResult> forward_in_halves(std::span<const SequenceForward> a,
                                                std::span<const SequenceForward> b);

  // Profiling: events around each op class, summed per class after the forward's sync.
  struct OpEvents {
    std::string op;
    cudaEvent_t start, stop;
  };
  void op_begin(const char* op);
  void op_end();
  void collect_profile();
  void add_profile(const std::string& op, double ms);
  void drop_graphs();

  ModelConfig config_;
  std::vector<LayerDesc> desc_;
  int num_sms_ = 0;
  std::string device_name_;
  // The forward lanes (forward_lane.h) and the one the forward being enqueued or collected runs
  // on: lane 0 outside forward(), and for everything but a split batch's second half.
  static constexpr int kForwardLanes = 2;
  std::array<ForwardLane, kForwardLanes> lanes_;
  ForwardLane* lane_ = &lanes_[0];
  int stream_priority_ = 0;  // the lanes' (the device's greatest)
  // Lane 1 starts after lane 0's earlier work; lane 0 ends after lane 1's.
  cudaEvent_t lane_fork_ = nullptr, lane_join_ = nullptr;
  // Batches of at least this many rows split over the lanes (overlap_split) in a tensor-parallel
  // rank, where one half's all-reduces run beside the other's compute. Measured on two H200s,
  // SDAR-8B at 128 requests (docs/benchmarks.md, 2026-11-29 sixth session): block 32 (4096 rows)
  // 71.7 -> 69.5 ms a step at TP 2; block 4 (512 rows) 14.7 -> 16.0 (half-size GEMMs lose more
  // than the hidden all-reduces gain), and a whole model's halves only contend (block 32 at TP 1
  // 3 % slower). DLLM_FORWARD_OVERLAP_ROWS sets it (for a whole model too), 0 turns it off.
  int64_t overlap_min_rows_ = 2048;
  bool overlap_whole_model_ = false;
  int64_t split_forwards_ = 0;
  DeviceBuffer<bf16> embed_, final_norm_, lm_head_;
  bool tied_ = false;
  // The LM head's vocabulary rows, ids [head_begin_, head_begin_ + head_rows_): all of them but
  // in a vocabulary-parallel rank (Model::lm_head_vocab_*), which gives each output row's
  // partial sums or its logits slice and leaves the statistics to its group.
  int64_t head_begin_ = 0, head_rows_ = 0;
  bool vocab_slice_ = false;
  std::vector<CudaLayer> layers_;
  DeviceBuffer<float> inv_freq_;  // RoPE (model/rope.h)
  float rope_scale_ = 1.0f;

  // The KV pool: per layer [num_slots, kv_dim] for K and V, and each slot's logical position.
  int64_t pool_slots_ = 0;
  DeviceBuffer<bf16> k_pool_, v_pool_;
  DeviceBuffer<int32_t> pool_positions_;

  // Method scratch, used on lane 0 alone (forward_lane.h), grown to the largest forward seen:
  // dLLM-Cache's block outputs, per-layer rows and attention plans; d2Cache's attention rows.
  DeviceBuffer<float> block_out_, attn_rows_ws_, attn_rows_out_;
  DeviceBuffer<int32_t> layer_ints_;
  DeviceBuffer<int32_t> layer_plan_;
  DeviceBuffer<float> dlc_sim_;     // dLLM-Cache: V similarities
  DeviceBuffer<float> rollout_ws_;  // d2Cache rollout: importance first, then scratch
  // Sparse selection's scratch: the prefix LSE of the selection rows and its chunk partials, one
  // region per selection lane (below) and one more on the main stream — Quest's query signs
  // (sel_ws_), the LSE of a selection from handed-over scores (sel_lse_) —, `*_lane_` elements
  // apart; the sets of a selection not kept (want_selection only); MAGE's / SparseD's
  // score sums of every sparse layer with their top-k's workspace, per selecting sequence
  // (PlannedSequence::select_scores_at; 1/128 of the bytes its K/V holds); Quest's page scores
  // and their top-k's workspace (on the main stream, one layer at a time).
  DeviceBuffer<float> sel_lse_, sel_ws_, sel_layer_scores_, quest_scores_;
  DeviceBuffer<int32_t> sel_sets_, sel_layer_topk_, quest_topk_ws_;
  size_t sel_lse_lane_ = 0, sel_ws_lane_ = 0;
  size_t sel_quest_region_ = 0;  // Quest's region: after the lanes'
  // Query rows per warp of the score sums (ScoreSumParams::rows_per_warp): 32, or 16 with
  // DLLM_MAGE_SCORE_ROWS=16 (comparisons).
  int mage_score_rows_ = 32;
  // MAGE's dual-stream design (method-specs §1.6): layer l's selection runs on its own stream
  // beside layers l, l + 1, ... of the main one, from a copy of the selecting sequences' query
  // rows (sel_q_, [layers, rows, q_dim]: the next layer overwrites q_); an event per layer hands
  // them over, one more joins the streams at the end of the forward. Created with the first
  // selection; DLLM_MAGE_SIDE_STREAM=0 runs the selection on the main stream instead.
  // The selecting sequences of a batch take kSelectLanes side streams in turn, each lane with its
  // own scratch: one sequence's kernels (a few blocks per KV head) leave most of the GPU idle, and
  // 32 sequences' selections one after the other cost +80 % over the exact step (2026-11-29).
  static constexpr int kSelectLanes = 8;
  bool select_side_stream_ = true;
  std::vector<cudaStream_t> select_streams_;  // the lanes, then the score stream (below)
  // Per layer (main -> lanes), then per lane and the score stream (joins).
  std::vector<cudaEvent_t> select_events_;
  int select_lanes_used_ = 0;  // lanes this forward forked (to join)
  DeviceBuffer<bf16> sel_q_;
  // The exact pass's hand-over (§1.6 step 1): each layer's prefix-only (m, l) per split and row
  // of the selecting sequences ([layers, capacity.prefix_rows, 2]: the side stream reads layer
  // l's while the main stream writes later layers'). DLLM_MAGE_LSE_HANDOVER=0 has the selection
  // compute the LSE with a pass over K of its own instead (comparisons).
  bool mage_lse_handover_ = true;
  DeviceBuffer<float> sel_prefix_ml_;
  // With a few selection rows (at most cuda::batch_layout::kMaxHandedScoreRows with their query
  // heads) the exact pass also hands their raw prefix scores over
  // (PlannedSequence::select_from_scores); DLLM_MAGE_SCORE_HANDOVER=0 has the score sums read K
  // instead (comparisons). Their sums and top-k run on a stream of their own (score_stream_),
  // beside the main stream: layer l's attention writes slot l % score_slots(plan) of
  // sel_prefix_scores_ once the sums of the layer that used the slot before are done
  // (score_slot_events_). The side stream, at the lowest priority, gets SMs only between the main
  // stream's kernels and may fall a few layers behind: as many slots as fit kScoreSlotBytes, 4 to
  // 16 (SDAR-8B's 128K step 1 with one query: 16 slots of 16 MB, 13.39 -> 13.13 ms against 4;
  // docs/benchmarks.md, 2026-12-01). DLLM_MAGE_SCORE_SLOTS sets the slots (tests).
  bool mage_score_handover_ = true;
  static constexpr int kMinScoreSlots = 4, kMaxScoreSlots = 16;
  static constexpr int64_t kScoreSlotBytes = int64_t{256} << 20;
  int score_slots_ = 0;  // DLLM_MAGE_SCORE_SLOTS, or 0: score_slots() sizes them
  int score_slots(const ForwardPlan& plan) const;
  DeviceBuffer<float> sel_prefix_scores_;
  // MAGE's rows' prefix-only (m, l) from their handed-over scores, per chunk of keys (one region:
  // every selecting sequence's sums run in turn on the score stream).
  DeviceBuffer<float> sel_score_ml_;
  cudaStream_t score_stream_ = nullptr;
  std::vector<cudaEvent_t> score_slot_events_;
  bool score_stream_used_ = false;  // this forward forked it (to join)
  float* layer_prefix_scores(const ForwardPlan& plan, int64_t layer);
  void wait_score_slot(const ForwardPlan& plan, int64_t layer);
  void ensure_select_streams();
  float* layer_prefix_ml(const ForwardPlan& plan, int64_t layer);
  // Sparse prefill: the layer's plan on the device and the keys read back for estimation.
  cuda::DeviceSparsePlan sp_prefill_plan_;
  DeviceBuffer<bf16> sp_prefill_k_;
  DeviceBuffer<int32_t> verify_in_;  // S2D2 verify: draft rows | tokens | uniforms (bits)
  DeviceBuffer<cuda::DeviceVerifyRow> verify_out_;

  bool graphs_enabled_ = true;  // DLLM_CUDA_GRAPHS=0 turns capture off (debugging, comparisons)
  // Captured graphs by shape (of one plan, or of a split batch's two), at most kMaxGraphs (the
  // least recently used one goes first).
  static constexpr size_t kMaxGraphs = 64;
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    uint64_t last_use = 0;
  };
  std::map<std::string, Graph> graphs_;
  std::set<std::string> seen_shapes_;
  uint64_t graph_uses_ = 0;

  bool profiling_ = false;
  DeviceAllReduce* group_sum_ = nullptr;  // set_partial_sum_reduce
  int group_world_ = 1;
  bool lead_rank_ = true;
  // While profiling: the routed experts with rows, summed over the MoE layers run (what the
  // rows actually touch; profiled_moe_experts_touched()).
  MoeTouchCount moe_touched_;
  void count_moe_touched();
  std::vector<OpEvents> events_;
  std::vector<std::pair<std::string, double>> profile_;
};

}  // namespace dllm::cuda_backend
