// The CUDA backend's one forward: prepare (cuda_forward_plan.cpp), run — directly, or by
// replaying a captured CUDA graph for a shape seen before — and collect (cuda_outputs.cpp); a big
// batch of a tensor-parallel rank runs as two halves on the two forward lanes (forward_lane.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sparse_select.h"

namespace dllm::cuda_backend {

std::vector<SequenceResult> CudaBackend::forward(std::span<const SequenceForward> batch) {
  const size_t split = overlap_split(batch);
  if (split > 0) return forward_in_halves(batch.first(split), batch.subspan(split));
  const auto t0 = std::chrono::steady_clock::now();
  ForwardPlan plan = prepare(batch);
  ensure_buffers(plan);
  if (profiling_)  // the host's share: planning and staging the batch
    add_profile(
        "host: prepare",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  launch(std::span(&plan, 1));
  return collect(plan, finish(plan));
}

// A batch splits into two halves, one on each lane, when it is big enough for their kernels to
// overlap and plain: no sequence needs the method scratch that lives on lane 0 alone (dLLM-Cache,
// d2Cache's rows, sparse attention or prefill) or a forward that cannot be captured (input
// embeddings). The cut falls between sequences, where the first half reaches half the rows;
// every rank of a tensor-parallel group cuts its batch alike, so the decision reads only the batch
// and settings all ranks share (not profiling_: only rank 0 profiles, and a rank splitting alone
// issued collectives the others never matched — a hang). 0: the batch runs whole.
size_t CudaBackend::overlap_split(std::span<const SequenceForward> batch) const {
  if (!graphs_enabled_ || batch.size() < 2) return 0;
  int64_t rows = 0;
  for (const SequenceForward& s : batch) {
    if (s.dllm_cache || s.sparse || s.sparse_prefill || s.want_attention_rows ||
        s.want_attention_rollout || s.input_embeddings || s.want_routing)
      return 0;
    rows += static_cast<int64_t>(s.tokens.size());
  }
  if (!may_split(rows)) return 0;
  int64_t first = 0;
  size_t split = 0;
  while (split + 1 < batch.size() && 2 * first < rows)
    first += static_cast<int64_t>(batch[split++].tokens.size());
  return split;
}

std::vector<SequenceResult> CudaBackend::forward_in_halves(std::span<const SequenceForward> a,
                                                           std::span<const SequenceForward> b) {
  // Whatever happens, the next forward starts on lane 0 with both lanes idle.
  struct BackToLaneZero {
    CudaBackend& self;
    ~BackToLaneZero() {
      for (ForwardLane& lane : self.lanes_) cudaStreamSynchronize(lane.stream);
      self.lane_ = &self.lanes_[0];
    }
  };
  if (!lanes_[1].created()) lanes_[1].create(stream_priority_);
  BackToLaneZero guard{*this};
  // Both halves are planned and their buffers sized before either runs (sizing may reallocate
  // and drop captured graphs). Their activations are lane 0's, the second half's in the tail
  // (view_second_half): a split batch needs no more of them than the whole batch.
  std::array<ForwardPlan, kForwardLanes> plans;
  const std::array<std::span<const SequenceForward>, kForwardLanes> halves{a, b};
  for (size_t i = 0; i < plans.size(); ++i) {
    lane_ = &lanes_[i];
    plans[i] = prepare(halves[i]);
  }
  lane_ = &lanes_[0];
  const bool moved =
      ensure_row_buffers(static_cast<size_t>(plans[0].padded_rows + plans[1].padded_rows),
                         static_cast<size_t>(plans[0].padded_out + plans[1].padded_out));
  for (size_t i = 0; i < plans.size(); ++i) {
    lane_ = &lanes_[i];
    ensure_lane_buffers(plans[i], moved);
  }
  view_second_half(plans[0], plans[1]);
  launch(plans);
  ++split_forwards_;
  std::vector<SequenceResult> results;
  for (size_t i = 0; i < plans.size(); ++i) {
    lane_ = &lanes_[i];
    for (SequenceResult& r : collect(plans[i], finish(plans[i]))) results.push_back(std::move(r));
  }
  return results;
}

// The activations that grow with a forward's rows (or its output rows), each with its elements
// per row, visited pairwise in lanes `a` and `b` (a lane with itself: one lane's).
template <class F>
void CudaBackend::visit_row_buffers(ForwardLane& a, ForwardLane& b, F&& f) const {
  const ModelConfig& c = config_;
  const size_t h = static_cast<size_t>(c.hidden_size), qd = static_cast<size_t>(c.q_dim()),
               inter = static_cast<size_t>(
                   std::max(c.intermediate_size, c.moe.shared_intermediate_size())),
               qkvd = qd + 2 * static_cast<size_t>(c.kv_dim());
  constexpr bool kOut = true;  // rows counted in output rows
  f(a.x, b.x, h, !kOut);
  f(a.xn, b.xn, h, !kOut);
  f(a.qkv, b.qkv, qkvd, !kOut);
  f(a.q, b.q, qd, !kOut);
  f(a.attn, b.attn, qd, !kOut);
  f(a.gu, b.gu, 2 * inter, !kOut);
  f(a.act, b.act, inter, !kOut);
  if (const MoeConfig& m = c.moe; m.num_experts > 0) {
    const size_t e = static_cast<size_t>(m.num_experts),
                 k = static_cast<size_t>(m.experts_per_token),
                 ie = static_cast<size_t>(m.expert_intermediate_size);
    f(a.router_logits, b.router_logits, e, !kOut);
    f(a.moe_experts, b.moe_experts, k, !kOut);
    f(a.moe_weights, b.moe_weights, k, !kOut);
    // Sorted positions: the routed assignments and the shared expert's rows (moe_sort's extra).
    f(a.moe_order, b.moe_order, k + 1, !kOut);
    f(a.moe_position, b.moe_position, k, !kOut);
    f(a.moe_act, b.moe_act, (k + 1) * ie, !kOut);
    f(a.moe_y, b.moe_y, (k + 1) * h, !kOut);
  }
  f(a.hn, b.hn, h, kOut);
  f(a.logits, b.logits, static_cast<size_t>(head_rows_), kOut);
}

bool CudaBackend::ensure_row_buffers(size_t rows, size_t out_rows) {
  bool moved = false;
  visit_row_buffers(*lane_, *lane_, [&](auto& buffer, auto&, size_t per_row, bool out) {
    moved |= buffer.ensure((out ? out_rows : rows) * per_row, out ? "output rows" : "activations");
  });
  return moved;
}

void CudaBackend::view_second_half(const ForwardPlan& first, const ForwardPlan& second) {
  const size_t rows = static_cast<size_t>(first.padded_rows),
               out_rows = static_cast<size_t>(first.padded_out);
  visit_row_buffers(lanes_[0], lanes_[1], [&](auto& whole, auto& tail, size_t per_row, bool out) {
    const size_t at = (out ? out_rows : rows) * per_row;
    const size_t n = static_cast<size_t>(out ? second.padded_out : second.padded_rows) * per_row;
    tail.view(whole.get() + at, n);
  });
}

void CudaBackend::ensure_buffers(const ForwardPlan& plan) {
  const bool moved = ensure_row_buffers(static_cast<size_t>(plan.padded_rows),
                                        static_cast<size_t>(plan.padded_out));
  ensure_lane_buffers(plan, moved);
}

void CudaBackend::ensure_lane_buffers(const ForwardPlan& plan, bool moved) {
  const ModelConfig& c = config_;
  const size_t T = static_cast<size_t>(plan.padded_rows), M = static_cast<size_t>(plan.padded_out);
  const size_t h = static_cast<size_t>(c.hidden_size);
  moved |= lane_->ints.ensure(plan.ints.size(), "staging");
  if (const MoeConfig& m = c.moe; m.num_experts > 0) {
    const size_t e = static_cast<size_t>(m.num_experts);
    moved |= lane_->moe_offsets.ensure(e + 1, "MoE dispatch");
    const int64_t assignments = static_cast<int64_t>(T * m.experts_per_token);
    moved |= lane_->moe_work.ensure(static_cast<size_t>(cuda::moe_work_list_ints(
                                        assignments, static_cast<int>(e), static_cast<int64_t>(T))),
                                    "MoE dispatch");
    moved |= lane_->moe_sort_scratch.ensure(
        static_cast<size_t>(cuda::moe_sort_scratch_ints(assignments, static_cast<int>(e))),
        "MoE dispatch");
  }
  if (plan.any_reuse) {
    moved |= block_out_.ensure(T * h, "block outputs");
    moved |= layer_ints_.ensure(4 * T, "per-layer rows");
    moved |= dlc_sim_.ensure(T, "dLLM-Cache similarities");
  }
  if (M > 0) moved |= lane_->stats.ensure(M, "token statistics");
  size_t rows_ws = 0;
  for (const PlannedSequence& p : plan.seqs)
    if (p.attention_width > 0)
      rows_ws =
          std::max(rows_ws, cuda::attention_rows_workspace_floats(
                                static_cast<int>(p.rows), static_cast<int>(p.n_keys),
                                static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads)));
  moved |= cuda::attention_batch_workspace_ensure(
      lane_->attn_ws,
      cuda::attention_batch_workspace_floats(plan.capacity.partial_rows,
                                             static_cast<int>(c.head_dim)),
      lane_->stream);
  moved |= attn_rows_ws_.ensure(rows_ws, "attention-rows workspace");
  moved |= attn_rows_out_.ensure(plan.attn_rows_total, "attention rows");
  if (plan.capacity.prefix_rows > 0)
    moved |= sel_prefix_ml_.ensure(
        static_cast<size_t>(c.num_layers * plan.capacity.prefix_rows * 2), "sparse selection");
  if (plan.capacity.prefix_score_floats > 0)
    moved |= sel_prefix_scores_.ensure(
        static_cast<size_t>(score_slots(plan) * plan.capacity.prefix_score_floats),
        "sparse selection scores");
  // Per lane, and Quest's one region: the most any sequence of the batch needs.
  size_t lse = 0, ws = 0, quest_scores = 0, quest_topk = 0, score_ml = 0;
  for (const PlannedSequence& p : plan.seqs) {
    if (p.quest_select) {  // page scores, their top-k, the query signs
      const int64_t pages =
          cuda::quest_pages(static_cast<int>(p.sparse_prefix), static_cast<int>(p.quest_page));
      quest_scores = std::max(quest_scores, static_cast<size_t>(pages * c.num_kv_heads));
      quest_topk = std::max(
          quest_topk,
          cuda::top_k_workspace_ints(static_cast<int>(pages), static_cast<int>(c.num_kv_heads)));
      ws = std::max(ws, static_cast<size_t>(2 * c.num_kv_heads * c.head_dim));
    }
    if (!p.sparse_select) continue;
    const int rows_used = static_cast<int>(p.select_rows.size());
    if (p.select_from_scores && !p.sparse_full_softmax)
      score_ml = std::max(
          score_ml, cuda::prefix_ml_from_scores_floats(static_cast<int>(p.sparse_prefix), rows_used,
                                                       static_cast<int>(c.num_heads)));
    lse = std::max(lse, static_cast<size_t>(p.rows * c.num_heads));
    ws = std::max(ws, cuda::prefix_lse_workspace_floats(static_cast<int>(p.sparse_prefix),
                                                        rows_used, static_cast<int>(c.num_heads),
                                                        static_cast<int>(c.num_kv_heads)));
  }
  const size_t lanes = static_cast<size_t>(std::max(plan.select_lanes, 1));
  auto lane_stride = [](size_t n) { return (n + 63) / 64 * 64; };  // 256-byte aligned regions
  sel_lse_lane_ = lane_stride(lse);
  sel_ws_lane_ = lane_stride(ws);
  // One region more for Quest, whose selection on the main stream may run beside MAGE's lanes.
  sel_quest_region_ = lanes;
  const size_t regions = lanes + 1;
  if (lse) moved |= sel_lse_.ensure(regions * sel_lse_lane_, "sparse selection");
  if (ws) moved |= sel_ws_.ensure(regions * sel_ws_lane_, "sparse selection");
  if (score_ml) moved |= sel_score_ml_.ensure(score_ml, "sparse selection");
  if (quest_scores) moved |= quest_scores_.ensure(quest_scores, "Quest page scores");
  if (quest_topk) moved |= quest_topk_ws_.ensure(quest_topk, "Quest top-k");
  if (plan.select_lanes > 0 && select_side_stream_)
    moved |= sel_q_.ensure(static_cast<size_t>(c.num_layers * plan.select_q_rows * c.q_dim()),
                           "sparse selection");
  if (plan.scratch_sets > 0) moved |= sel_sets_.ensure(plan.scratch_sets, "sparse selection");
  if (plan.select_scores > 0) {
    moved |= sel_layer_scores_.ensure(plan.select_scores, "sparse selection scores");
    moved |= sel_layer_topk_.ensure(plan.select_topk, "sparse selection top-k");
  }
  moved |= lane_->pinned_ints.ensure(plan.ints.size());
  moved |= lane_->pinned_stats.ensure(std::max<size_t>(M, 1));
  if (moved) drop_graphs();
}

// Vision prompts: the rows whose positions carry given embeddings overwrite the token
// embeddings in the fp32 residual stream, one copy per run of consecutive rows whose given
// embeddings are consecutive too (a placeholder run of the prefill is one copy). Not captured
// (such plans are never graphable), so the host rows are read when the copy is enqueued.
void CudaBackend::splice_input_embeddings(const ForwardPlan& plan) {
  const int64_t h = config_.hidden_size;
  for (const PlannedSequence& p : plan.seqs) {
    const InputEmbeddings* e = p.seq->input_embeddings.get();
    if (!e) continue;
    const auto& pos = p.seq->positions;
    for (int64_t i = 0; i < p.rows;) {
      const float* first = e->at(pos[static_cast<size_t>(i)]);
      if (!first) {
        ++i;
        continue;
      }
      int64_t n = 1;
      while (i + n < p.rows && e->at(pos[static_cast<size_t>(i + n)]) == first + n * h) ++n;
      DLLM_CUDA_CHECK(cudaMemcpyAsync(lane_->x.get() + (p.row_offset + i) * h, first,
                                      static_cast<size_t>(n * h) * sizeof(float),
                                      cudaMemcpyHostToDevice, lane_->stream));
      i += n;
    }
  }
}

void CudaBackend::enqueue_inputs(ForwardPlan& plan, const int32_t* ints) {
  DLLM_CUDA_CHECK(cudaMemcpyAsync(lane_->ints.get(), ints, plan.ints.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, lane_->stream));
  if (plan.attn_rows_total > 0)
    DLLM_CUDA_CHECK(cudaMemsetAsync(attn_rows_out_.get(), 0, plan.attn_rows_total * sizeof(float),
                                    lane_->stream));
  op_begin("embedding");
  cuda::embed(lane_->ints.get(), embed_.get(), lane_->x.get(), static_cast<int>(plan.padded_rows),
              static_cast<int>(config_.hidden_size), lane_->stream);
  op_end();
  if (plan.any_input_embeddings) splice_input_embeddings(plan);
}

void CudaBackend::enqueue(std::span<ForwardPlan> plans, bool pinned_ints) {
  // Lane 1 starts after lane 0's earlier work (the pool's page copies); in a capture this brings
  // it into the graph.
  const bool halves = plans.size() > 1;
  if (halves) {
    DLLM_CUDA_CHECK(cudaEventRecord(lane_fork_, lanes_[0].stream));
    DLLM_CUDA_CHECK(cudaStreamWaitEvent(lanes_[1].stream, lane_fork_));
  }
  auto on_lane = [&](size_t i) -> ForwardPlan& {
    lane_ = &lanes_[i];
    return plans[i];
  };
  for (size_t i = 0; i < plans.size(); ++i) {
    ForwardPlan& plan = on_lane(i);
    enqueue_inputs(plan, pinned_ints ? lane_->pinned_ints.get() : plan.ints.data());
  }
  std::array<LayerRows, kForwardLanes> rows;
  for (int64_t li = 0; li < config_.num_layers; ++li) {
    for (size_t i = 0; i < plans.size(); ++i) {
      ForwardPlan& plan = on_lane(i);
      rows[i] = layer_rows(plan, li);
      enqueue_attention_block(plan, li, rows[i]);
    }
    for (size_t i = 0; i < plans.size(); ++i) enqueue_ffn_block(on_lane(i), li, rows[i]);
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    ForwardPlan& plan = on_lane(i);
    enqueue_outputs(plan, lane_->pinned_stats.get());
    // After the outputs: the last layers' selections run beside the LM head instead of before
    // it (nothing in this forward reads the sets; the host syncs the main stream, which waits
    // here).
    if (plan.any_sparse_select) {
      enqueue_remaining_top_k(plan);
      join_sparse_selection();
    }
  }
  if (halves) {  // lane 0 ends after lane 1 (a capture must end where it began)
    DLLM_CUDA_CHECK(cudaEventRecord(lane_join_, lanes_[1].stream));
    DLLM_CUDA_CHECK(cudaStreamWaitEvent(lanes_[0].stream, lane_join_));
  }
  lane_ = &lanes_[0];
}

void CudaBackend::launch(std::span<ForwardPlan> plans) {
  const bool graphable =
      std::all_of(plans.begin(), plans.end(), [](const ForwardPlan& p) { return p.graphable; });
  if (!graphable) {
    enqueue(plans, /*pinned_ints=*/false);
    return;
  }
  // Everything a captured graph bakes in besides the fixed buffers: each plan's shape, and where
  // its attention plan starts in the staging (after the banned-token lists, one per distinct list
  // of the step: two steps of one shape may stage different counts, and a graph replayed with the
  // other's offset read the attention plan from the wrong place — wild writes under
  // compute-sanitizer in CudaS2d2.GenerationsTrackTheCpu).
  std::string key;
  for (size_t i = 0; i < plans.size(); ++i) {
    const ForwardPlan& plan = plans[i];
    std::copy(plan.ints.begin(), plan.ints.end(), lanes_[i].pinned_ints.get());
    const cuda::AttentionBatchCapacity& cap = plan.capacity;
    key += (i ? "|" : "") + std::to_string(plan.padded_rows) + "/" +
           std::to_string(plan.padded_out) + "/" + std::to_string(plan.ints.size()) + "/" +
           std::to_string(cap.mma_items) + "/" + std::to_string(cap.sm90_items) + "/" +
           std::to_string(cap.sm90_ws_items) + "/" + std::to_string(cap.partial_rows) + "/" +
           std::to_string(cap.combine) + "/" + std::to_string(cap.ws_block_causal) + "/" +
           std::to_string(plan.attention.offset);
    for (const LayerAttention& la : plan.layer_attentions)  // sparse layers' plans
      key += "/" + std::to_string(la.plan.offset) + ":" + std::to_string(la.sparse_table_at) + ":" +
             std::to_string(la.sparse_count) + ":" + std::to_string(la.capacity.mma_items) + ":" +
             std::to_string(la.capacity.sm90_items) + ":" +
             std::to_string(la.capacity.sm90_ws_items) + ":" + std::to_string(la.capacity.combine) +
             ":" + std::to_string(la.capacity.ws_block_causal);
  }
  auto it = graphs_.find(key);
  if (seen_shapes_.size() > 4096) seen_shapes_.clear();  // a bound: shapes seen once each
  if (it == graphs_.end() && !seen_shapes_.insert(key).second) {
    // Second time this shape comes: capture it (the first ran directly and warmed everything up).
    if (graphs_.size() >= kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(), [](const auto& x, const auto& y) {
        return x.second.last_use < y.second.last_use;
      });
      cudaGraphExecDestroy(lru->second.exec);
      graphs_.erase(lru);
    }
    cudaGraph_t graph = nullptr;
    DLLM_CUDA_CHECK(cudaStreamBeginCapture(lanes_[0].stream, cudaStreamCaptureModeThreadLocal));
    enqueue(plans, /*pinned_ints=*/true);
    DLLM_CUDA_CHECK(cudaStreamEndCapture(lanes_[0].stream, &graph));
    cudaGraphExec_t exec = nullptr;
    DLLM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    it = graphs_.emplace(key, Graph{exec, 0}).first;
  }
  if (it == graphs_.end()) {
    enqueue(plans, /*pinned_ints=*/true);
    return;
  }
  it->second.last_use = ++graph_uses_;
  DLLM_CUDA_CHECK(cudaGraphLaunch(it->second.exec, lanes_[0].stream));
}

std::vector<cuda::DeviceRowSums> CudaBackend::finish(const ForwardPlan& plan) {
  DLLM_CUDA_CHECK(cudaStreamSynchronize(lanes_[0].stream));
  const cuda::DeviceRowSums* stats = lane_->pinned_stats.get();
  return std::vector<cuda::DeviceRowSums>(stats, stats + plan.padded_out);
}

}  // namespace dllm::cuda_backend
