// The CUDA backend's one forward: prepare (cuda_forward_plan.cpp), run — directly, or by
// replaying a captured CUDA graph for a shape seen before — and collect (cuda_outputs.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sparse_select.h"

namespace dllm::cuda_backend {

std::vector<SequenceResult> CudaBackend::forward(std::span<const SequenceForward> batch) {
  const auto t0 = std::chrono::steady_clock::now();
  ForwardPlan plan = prepare(batch);
  ensure_buffers(plan);
  if (profiling_)  // the host's share: planning and staging the batch
    add_profile(
        "host: prepare",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  std::vector<cuda::DeviceRowSums> stats(static_cast<size_t>(plan.padded_out));
  run_graph_or_direct(plan, stats);
  return collect(plan, stats);
}

void CudaBackend::ensure_buffers(const ForwardPlan& plan) {
  const ModelConfig& c = config_;
  const size_t T = static_cast<size_t>(plan.padded_rows), M = static_cast<size_t>(plan.padded_out);
  const size_t h = static_cast<size_t>(c.hidden_size), qd = static_cast<size_t>(c.q_dim()),
               inter = static_cast<size_t>(
                   std::max(c.intermediate_size, c.moe.shared_intermediate_size())),
               qkvd = qd + 2 * static_cast<size_t>(c.kv_dim());
  bool moved = false;
  moved |= x_.ensure(T * h, "activations");
  moved |= xn_.ensure(T * h, "activations");
  moved |= qkv_.ensure(T * qkvd, "activations");
  moved |= q_.ensure(T * qd, "activations");
  moved |= attn_.ensure(T * qd, "activations");
  moved |= gu_.ensure(T * 2 * inter, "activations");
  moved |= act_.ensure(T * inter, "activations");
  moved |= ints_.ensure(plan.ints.size(), "staging");
  if (const MoeConfig& m = c.moe; m.num_experts > 0) {
    const size_t e = static_cast<size_t>(m.num_experts),
                 a = T * static_cast<size_t>(m.experts_per_token),
                 ie = static_cast<size_t>(m.expert_intermediate_size);
    moved |= router_logits_.ensure(T * e, "MoE router logits");
    moved |= moe_experts_.ensure(a, "MoE routing");
    moved |= moe_weights_.ensure(a, "MoE routing");
    moved |= moe_offsets_.ensure(e + 1, "MoE dispatch");
    moved |= moe_active_.ensure(e + 1, "MoE dispatch");
    moved |= moe_order_.ensure(a, "MoE dispatch");
    moved |= moe_position_.ensure(a, "MoE dispatch");
    moved |= moe_gu_.ensure(a * 2 * ie, "MoE activations");
    moved |= moe_act_.ensure(a * ie, "MoE activations");
    moved |= moe_y_.ensure(a * h, "MoE activations");
  }
  if (plan.any_reuse) {
    moved |= block_out_.ensure(T * h, "block outputs");
    moved |= layer_ints_.ensure(4 * T, "per-layer rows");
    moved |= dlc_sim_.ensure(T, "dLLM-Cache similarities");
  }
  if (M > 0) {
    moved |= hn_.ensure(M * h, "output rows");
    moved |= logits_.ensure(M * static_cast<size_t>(head_rows_), "logits");
    moved |= stats_.ensure(M, "token statistics");
  }
  size_t rows_ws = 0;
  for (const PlannedSequence& p : plan.seqs)
    if (p.attention_width > 0)
      rows_ws =
          std::max(rows_ws, cuda::attention_rows_workspace_floats(
                                static_cast<int>(p.rows), static_cast<int>(p.n_keys),
                                static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads)));
  moved |= cuda::attention_batch_workspace_ensure(
      attn_ws_,
      cuda::attention_batch_workspace_floats(plan.capacity.partial_rows,
                                             static_cast<int>(c.head_dim)),
      stream_);
  moved |= attn_rows_ws_.ensure(rows_ws, "attention-rows workspace");
  moved |= attn_rows_out_.ensure(plan.attn_rows_total, "attention rows");
  if (plan.capacity.prefix_rows > 0)
    moved |= sel_prefix_ml_.ensure(
        static_cast<size_t>(c.num_layers * plan.capacity.prefix_rows * 2), "sparse selection");
  // Per lane: the most any selecting sequence of the batch needs.
  size_t lse = 0, ws = 0, scores = 0, topk = 0;
  int selecting = 0;
  for (const PlannedSequence& p : plan.seqs) {
    if (p.quest_select) {  // page scores, their top-k, the query signs
      const int64_t pages = p.sparse_prefix / p.quest_page;
      scores = std::max(scores, static_cast<size_t>(pages * c.num_kv_heads));
      topk = std::max(topk, cuda::top_k_workspace_ints(static_cast<int>(pages),
                                                       static_cast<int>(c.num_kv_heads)));
      ws = std::max(ws, static_cast<size_t>(2 * c.num_kv_heads * c.head_dim));
    }
    if (!p.sparse_select) continue;
    ++selecting;
    const int rows_used = static_cast<int>(p.select_rows.size());
    lse = std::max(lse, static_cast<size_t>(p.rows * c.num_heads));
    ws = std::max(ws, cuda::prefix_lse_workspace_floats(
                          static_cast<int>(p.sparse_prefix), rows_used,
                          static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads)));
    scores = std::max(scores, static_cast<size_t>(p.sparse_prefix * c.num_kv_heads));
    topk = std::max(topk, cuda::top_k_workspace_ints(static_cast<int>(p.sparse_prefix),
                                                     static_cast<int>(c.num_kv_heads)));
  }
  const size_t lanes = static_cast<size_t>(
      select_side_stream_ ? std::clamp(selecting, 1, int{kSelectLanes}) : 1);
  auto lane_stride = [](size_t n) { return (n + 63) / 64 * 64; };  // 256-byte aligned regions
  sel_lse_lane_ = lane_stride(lse);
  sel_ws_lane_ = lane_stride(ws);
  sel_scores_lane_ = lane_stride(scores);
  sel_topk_lane_ = lane_stride(topk);
  // One region more for Quest, whose selection on the main stream may run beside MAGE's lanes.
  sel_quest_region_ = lanes;
  const size_t regions = lanes + 1;
  if (lse) moved |= sel_lse_.ensure(regions * sel_lse_lane_, "sparse selection");
  if (ws) moved |= sel_ws_.ensure(regions * sel_ws_lane_, "sparse selection");
  if (scores) moved |= sel_scores_.ensure(regions * sel_scores_lane_, "sparse selection");
  if (topk) moved |= sel_topk_ws_.ensure(regions * sel_topk_lane_, "sparse selection");
  if (selecting > 0 && select_side_stream_)
    moved |= sel_q_.ensure(static_cast<size_t>(c.num_layers * plan.select_q_rows * c.q_dim()),
                           "sparse selection");
  if (plan.scratch_sets > 0) moved |= sel_sets_.ensure(plan.scratch_sets, "sparse selection");
  moved |= pinned_ints_.ensure(plan.ints.size());
  moved |= pinned_stats_.ensure(std::max<size_t>(M, 1));
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
      DLLM_CUDA_CHECK(cudaMemcpyAsync(x_.get() + (p.row_offset + i) * h, first,
                                      static_cast<size_t>(n * h) * sizeof(float),
                                      cudaMemcpyHostToDevice, stream_));
      i += n;
    }
  }
}

void CudaBackend::enqueue(ForwardPlan& plan, const int32_t* ints,
                          cuda::DeviceRowSums* stats_dst) {
  DLLM_CUDA_CHECK(cudaMemcpyAsync(ints_.get(), ints, plan.ints.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
  if (plan.attn_rows_total > 0)
    DLLM_CUDA_CHECK(
        cudaMemsetAsync(attn_rows_out_.get(), 0, plan.attn_rows_total * sizeof(float), stream_));
  op_begin("embedding");
  cuda::embed(ints_.get(), embed_.get(), x_.get(), static_cast<int>(plan.padded_rows),
              static_cast<int>(config_.hidden_size), stream_);
  op_end();
  if (plan.any_input_embeddings) splice_input_embeddings(plan);
  for (int64_t li = 0; li < config_.num_layers; ++li) enqueue_layer(plan, li);
  enqueue_outputs(plan, stats_dst);
  // After the outputs: the last layers' selections run beside the LM head instead of before it
  // (nothing in this forward reads the sets; the host syncs the main stream, which waits here).
  if (plan.any_sparse_select) join_sparse_selection();
}

void CudaBackend::run_graph_or_direct(ForwardPlan& plan,
                                      std::vector<cuda::DeviceRowSums>& stats) {
  const size_t M = stats.size();
  if (!plan.graphable) {
    enqueue(plan, plan.ints.data(), stats.data());
    return;
  }
  std::copy(plan.ints.begin(), plan.ints.end(), pinned_ints_.get());
  // Everything a captured graph bakes in besides the fixed buffers: the shape, and where the
  // attention plan starts in the staging (after the banned-token lists, one per distinct list of
  // the step: two steps of one shape may stage different counts, and a graph replayed with the
  // other's offset read the attention plan from the wrong place — wild writes under
  // compute-sanitizer in CudaS2d2.GenerationsTrackTheCpu).
  const cuda::AttentionBatchCapacity& cap = plan.capacity;
  std::string key = std::to_string(plan.padded_rows) + "/" + std::to_string(M) + "/" +
                    std::to_string(plan.ints.size()) + "/" + std::to_string(cap.mma_items) + "/" +
                    std::to_string(cap.sm90_items) + "/" + std::to_string(cap.partial_rows) + "/" +
                    std::to_string(cap.combine) + "/" + std::to_string(plan.attention.offset);
  for (const LayerAttention& la : plan.layer_attentions)  // sparse layers' plans
    key += "/" + std::to_string(la.plan.offset) + ":" + std::to_string(la.sparse_table_at) + ":" +
           std::to_string(la.sparse_count);
  auto it = graphs_.find(key);
  if (seen_shapes_.size() > 4096) seen_shapes_.clear();  // a bound: shapes seen once each
  if (it == graphs_.end() && !seen_shapes_.insert(key).second) {
    // Second time this shape comes: capture it (the first ran directly and warmed everything up).
    if (graphs_.size() >= kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
        return a.second.last_use < b.second.last_use;
      });
      cudaGraphExecDestroy(lru->second.exec);
      graphs_.erase(lru);
    }
    cudaGraph_t graph = nullptr;
    DLLM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    enqueue(plan, pinned_ints_.get(), pinned_stats_.get());
    DLLM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    DLLM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    it = graphs_.emplace(key, Graph{exec, 0}).first;
  }
  if (it == graphs_.end()) {
    enqueue(plan, pinned_ints_.get(), stats.data());
    return;
  }
  it->second.last_use = ++graph_uses_;
  DLLM_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
  DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::copy(pinned_stats_.get(), pinned_stats_.get() + M, stats.begin());
}

}  // namespace dllm::cuda_backend
