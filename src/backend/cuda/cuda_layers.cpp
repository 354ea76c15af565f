// run: the layer list over the batch's rows. Every sequence's rows share the GEMMs and the
// norm / RoPE / cache-write kernels; attention runs per sequence over its keys in the pool.
// dLLM-Cache's reuse (method-specs §6.3) is an option of the same loop: a layer recomputes only
// the rows its rule selects for that sequence, the others keep residual + kept outputs.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.h"
#include "backend/dllm_cache_rows.h"

namespace dllm::cuda_backend {

// dLLM-Cache: V of every response row (written to the pool), then the least similar rows
// refresh. The similarities come back to the host (a sync per layer — this is a baseline, as the
// reference's torch.topk on the device).
std::vector<int32_t> CudaBackend::rows_by_similarity(const PlannedSequence& p, int64_t layer) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim();
  const CudaLayer& L = layers_[static_cast<size_t>(layer)];
  const DllmCacheStep& dc = *p.seq->dllm_cache;
  const int64_t p_len = dc.prompt_length, g_len = p.rows - p_len;
  std::vector<int32_t> staged(static_cast<size_t>(2 * g_len));  // batch rows | pool slots
  for (int64_t g = 0; g < g_len; ++g) {
    staged[static_cast<size_t>(g)] = static_cast<int32_t>(p.row_offset + p_len + g);
    staged[static_cast<size_t>(g_len + g)] =
        static_cast<int32_t>(p.cache->physical_slot(p_len + g));
  }
  DLLM_CUDA_CHECK(cudaMemcpyAsync(layer_ints_.get(), staged.data(), staged.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, lane_->stream));
  cuda::rms_norm(lane_->x.get(), layer_ints_.get(), L.attn_norm.get(), lane_->xn.get(),
                 static_cast<int>(g_len), static_cast<int>(h), static_cast<float>(c.norm_eps),
                 lane_->stream);
  cuda::gemm_nt(lane_->cublas, lane_->xn.get(), L.qkv.get() + (qd + kvd) * h, lane_->qkv.get(),
                CUDA_R_32F, static_cast<int>(g_len), static_cast<int>(kvd), static_cast<int>(h),
                false);
  cuda::value_similarity(lane_->qkv.get(), L.qkv_bias.get() ? L.qkv_bias.get() + qd + kvd : nullptr,
                         v_pool(layer), layer_ints_.get() + g_len, dlc_sim_.get(),
                         static_cast<int>(g_len), static_cast<int>(kvd), lane_->stream);
  std::vector<float> sim(static_cast<size_t>(g_len));
  DLLM_CUDA_CHECK(cudaMemcpyAsync(sim.data(), dlc_sim_.get(), sim.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, lane_->stream));
  DLLM_CUDA_CHECK(cudaStreamSynchronize(lane_->stream));
  const std::vector<double> sim_d(sim.begin(), sim.end());
  return least_similar_rows(sim_d, dc.rho, static_cast<int32_t>(p_len));
}

LayerRows CudaBackend::layer_rows(ForwardPlan& plan, int64_t layer) {
  LayerRows r;
  const size_t n_seqs = plan.seqs.size();
  r.first.resize(n_seqs);
  r.size.resize(n_seqs);
  if (!plan.any_reuse) {  // every row of the batch, where prepare() staged them
    r.count = plan.padded_rows;
    r.positions = lane_->ints.get() + plan.positions_at;
    r.slots = lane_->ints.get() + plan.slots_at;
    for (size_t si = 0; si < n_seqs; ++si) {
      r.first[si] = plan.seqs[si].row_offset;
      r.size[si] = plan.seqs[si].rows;
    }
    return r;
  }
  r.all = false;
  r.seq_rows.resize(n_seqs);
  std::vector<int32_t> rows, positions, slots;
  for (size_t si = 0; si < n_seqs; ++si) {
    PlannedSequence& p = plan.seqs[si];
    std::vector<int32_t>& mine = r.seq_rows[si];
    if (!p.reuse) {
      mine.resize(static_cast<size_t>(p.rows));
      std::iota(mine.begin(), mine.end(), 0);
    } else {
      ReuseRows chosen = reuse_rows(*p.seq->dllm_cache, p.rows, p.reuse_first, layer);
      mine = std::move(chosen.rows);
      if (chosen.by_similarity)
        for (int32_t row : rows_by_similarity(p, layer)) mine.push_back(row);
    }
    r.first[si] = static_cast<int64_t>(rows.size());
    r.size[si] = static_cast<int64_t>(mine.size());
    for (int32_t i : mine) {
      rows.push_back(static_cast<int32_t>(p.row_offset + i));
      positions.push_back(p.seq->positions[static_cast<size_t>(i)]);
      slots.push_back(
          static_cast<int32_t>(p.cache->physical_slot(p.query_slots[static_cast<size_t>(i)])));
    }
  }
  r.count = static_cast<int64_t>(rows.size());
  std::vector<int32_t> staged = rows;
  staged.insert(staged.end(), positions.begin(), positions.end());
  staged.insert(staged.end(), slots.begin(), slots.end());
  if (!staged.empty())
    DLLM_CUDA_CHECK(cudaMemcpyAsync(layer_ints_.get(), staged.data(),
                                    staged.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                    lane_->stream));
  r.rows = layer_ints_.get();
  r.positions = r.rows + r.count;
  r.slots = r.positions + r.count;
  return r;
}

void CudaBackend::enqueue_attention(ForwardPlan& plan, int64_t layer, const LayerRows& rows) {
  const ModelConfig& c = config_;
  cuda::AttentionBatchParams ap;
  ap.q = lane_->q.get();
  ap.k_pool = k_pool(layer);
  ap.v_pool = v_pool(layer);
  ap.slot_positions = pool_positions_.get();
  ap.q_positions = rows.positions;
  ap.workspace = lane_->attn_ws.get();
  ap.out = lane_->attn.get();
  ap.shape = attention_shape();
  if (rows.all) {  // the plan staged with the step (the layer's own with sparse attention)
    ap.plan = lane_->ints.get() + layer_attention(plan, layer).offset;
    ap.capacity = layer_capacity(plan, layer);
    ap.prefix_ml = layer_prefix_ml(plan, layer);
    ap.prefix_scores = layer_prefix_scores(plan, layer);
  } else {  // dLLM-Cache in the batch: this layer's rows, planned and staged now
    std::vector<cuda::AttentionBatchSeq> seqs = plan.attention_seqs;
    for (size_t si = 0; si < seqs.size(); ++si) seqs[si].n_q = static_cast<int>(rows.size[si]);
    std::vector<int32_t> staged;
    const cuda::AttentionBatchPlan lp = cuda::attention_batch_plan(seqs, ap.shape, staged);
    layer_plan_.ensure(staged.size(), "per-layer attention plans");
    DLLM_CUDA_CHECK(cudaMemcpyAsync(layer_plan_.get(), staged.data(),
                                    staged.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                    lane_->stream));
    cuda::attention_batch_workspace_ensure(
        lane_->attn_ws,
        cuda::attention_batch_workspace_floats(lp.need.partial_rows, ap.shape.head_dim),
        lane_->stream);
    ap.workspace = lane_->attn_ws.get();
    ap.plan = layer_plan_.get() + lp.offset;
    ap.capacity = lp.need;
  }
  op_begin("attention");
  cuda::attention_batch(ap, lane_->stream);
  op_end();
  // MMInference sparse prefill: the rows the batched kernel left to it (a layer with
  // attended_elsewhere sequences; never with dLLM-Cache rows, stage_sparse() refuses those).
  if (rows.all && plan.any_sparse_prefill) enqueue_sparse_prefill(plan, layer);
  // d2Cache's head-averaged attention rows, per sequence that wants them.
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    PlannedSequence& p = plan.seqs[si];
    if (p.attention_width == 0 || rows.size[si] == 0) continue;
    cuda::AttentionRowsParams rp;
    rp.q = lane_->q.get() + rows.first[si] * c.q_dim();
    rp.k_cache = k_pool(layer);
    rp.key_slots = lane_->ints.get() + p.keys_at;
    rp.column_slots = lane_->ints.get() + p.logical_keys_at;
    rp.n_q = static_cast<int>(rows.size[si]);
    rp.n_keys = static_cast<int>(p.n_keys);
    rp.heads = ap.shape.heads;
    rp.kv_heads = ap.shape.kv_heads;
    rp.head_dim = ap.shape.head_dim;
    rp.width = static_cast<int>(p.attention_width);
    rp.scale = ap.shape.scale;
    rp.out = attn_rows_out_.get() + p.attn_rows_at + static_cast<size_t>(layer) * rp.n_q * rp.width;
    rp.workspace = attn_rows_ws_.get();
    op_begin("attention rows");
    cuda::attention_rows(rp, lane_->stream);
    op_end();
  }
}

void CudaBackend::add_block_output(ForwardPlan& plan, int64_t layer, const LayerRows& rows,
                                   bool ffn) {
  const int64_t h = config_.hidden_size;
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    PlannedSequence& p = plan.seqs[si];
    const int m = static_cast<int>(rows.size[si]);
    const float* out = block_out_.get() + rows.first[si] * h;
    const int32_t* batch_rows = rows.rows + rows.first[si];
    if (!p.reuse) {
      if (m > 0)
        cuda::add_rows(out, batch_rows, lane_->x.get(), m, static_cast<int>(h), lane_->stream);
      continue;
    }
    // Keep the recomputed rows' outputs, then every canvas row adds its kept output.
    auto& st = static_cast<CudaMethodState&>(*p.seq->state);
    float* kept = (ffn ? st.ffn_out : st.attn_out).get() + layer * p.rows * h;
    if (m > 0) {
      std::vector<int32_t> local = rows.seq_rows[si];
      DLLM_CUDA_CHECK(cudaMemcpyAsync(layer_ints_.get() + 3 * rows.count, local.data(),
                                      local.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                      lane_->stream));
      cuda::scatter_rows(out, layer_ints_.get() + 3 * rows.count, kept, m, static_cast<int>(h),
                         lane_->stream);
    }
    cuda::add_inplace(lane_->x.get() + p.row_offset * h, kept, p.rows * h, lane_->stream);
  }
}

// Outputs go straight into the residual stream when every row is recomputed (else into
// block_out_, dLLM-Cache). In a tensor-parallel group each rank's o / down output is a partial sum
// over its heads / features: only rank 0 adds its partial to the residual, the others write
// theirs alone, and the sum in place leaves residual + every partial on every rank.
float* CudaBackend::block_output(const LayerRows& rows) {
  return rows.all ? lane_->x.get() : block_out_.get();
}

void CudaBackend::sum_over_group(const LayerRows& rows) {
  if (!group_sum_ || rows.count == 0) return;
  op_begin("all-reduce");
  group_sum_->sum(block_output(rows), rows.count * config_.hidden_size, lane_->stream);
  op_end();
}

void CudaBackend::enqueue_attention_block(ForwardPlan& plan, int64_t li, const LayerRows& rows) {
  const ModelConfig& c = config_;
  const AttentionDesc& a = desc_[static_cast<size_t>(li)].attention;
  const int64_t h = c.hidden_size, qd = a.heads * a.head_dim, kvd = a.kv_heads * a.head_dim;
  const float eps = static_cast<float>(c.norm_eps);
  CudaLayer& L = layers_[static_cast<size_t>(li)];
  const int M = static_cast<int>(rows.count);
  // Sparse sequences' key lists for this layer: enqueued here, several kernels before the
  // attention call, which reads its plan before its programmatic-launch wait (with Quest in the
  // batch: after its selection, which needs this layer's queries).
  if (!plan.any_quest) enqueue_sparse_keys(plan, li);
  if (M > 0) {
    op_begin("norms");
    cuda::rms_norm(lane_->x.get(), rows.rows, L.attn_norm.get(), lane_->xn.get(), M,
                   static_cast<int>(h), eps, lane_->stream);
    op_end();
    op_begin("gemm");
    cuda::gemm_nt(lane_->cublas, lane_->xn.get(), L.qkv.get(), lane_->qkv.get(), CUDA_R_32F, M,
                  static_cast<int>(qd + 2 * kvd), static_cast<int>(h), false);
    op_end();
    cuda::QkvPostParams qp;
    qp.qkv = lane_->qkv.get();
    qp.bias = a.qkv_bias ? L.qkv_bias.get() : nullptr;
    qp.q_norm = a.qk_norm ? L.q_norm.get() : nullptr;
    qp.k_norm = a.qk_norm ? L.k_norm.get() : nullptr;
    qp.positions = rows.positions;
    qp.slots = rows.slots;
    qp.inv_freq = inv_freq_.get();
    qp.rope_scale = rope_scale_;
    qp.q_out = lane_->q.get();
    qp.k_cache = k_pool(li);
    qp.v_cache = v_pool(li);
    qp.slot_positions = li == 0 ? pool_positions_.get() : nullptr;
    qp.n = M;
    qp.heads = static_cast<int>(a.heads);
    qp.kv_heads = static_cast<int>(a.kv_heads);
    qp.head_dim = static_cast<int>(a.head_dim);
    qp.rotary_dim = static_cast<int>(a.rotary_dim);
    qp.eps = eps;
    op_begin("qk-norm+rope+cache write");
    cuda::qkv_post(qp, lane_->stream);
    op_end();
    if (plan.any_quest) {
      enqueue_quest_selection(plan, li);
      enqueue_sparse_keys(plan, li);
      expand_quest_sets(plan, li);  // a kernel between the key lists and the attention
    }
    wait_score_slot(plan, li);
    enqueue_attention(plan, li, rows);
    // After the attention, which hands the selection each row's prefix-only LSE over.
    if (plan.any_sparse_select) enqueue_sparse_selection(plan, li);
    op_begin("gemm");
    cuda::gemm_nt(lane_->cublas, lane_->attn.get(), L.o.get(), block_output(rows), CUDA_R_32F, M,
                  static_cast<int>(h), static_cast<int>(qd), rows.all && lead_rank_);
    op_end();
    sum_over_group(rows);
  }
  if (!rows.all) add_block_output(plan, li, rows, /*ffn=*/false);
}

void CudaBackend::enqueue_ffn_block(ForwardPlan& plan, int64_t li, const LayerRows& rows) {
  const int M = static_cast<int>(rows.count);
  if (M > 0) {
    op_begin("norms");
    cuda::rms_norm(lane_->x.get(), rows.rows, layers_[static_cast<size_t>(li)].mlp_norm.get(),
                   lane_->xn.get(), M, static_cast<int>(config_.hidden_size),
                   static_cast<float>(config_.norm_eps), lane_->stream);
    op_end();
    enqueue_ffn(li, M, block_output(rows), rows.all && lead_rank_);
    if (plan.any_routing && desc_[static_cast<size_t>(li)].ffn == FfnKind::kMoeSwiGlu)
      keep_routing(plan, li, rows);
    sum_over_group(rows);
  }
  if (!rows.all) add_block_output(plan, li, rows, /*ffn=*/true);
}

void CudaBackend::enqueue_ffn(int64_t li, int m, float* out, bool accumulate) {
  const LayerDesc& d = desc_[static_cast<size_t>(li)];
  if (d.ffn == FfnKind::kMoeSwiGlu) return enqueue_moe(li, m, out, accumulate);
  const CudaLayer& L = layers_[static_cast<size_t>(li)];
  enqueue_swiglu_ffn(L.gate_up.get(), L.down.get(), static_cast<int>(d.intermediate_size), m, out,
                     accumulate, "gemm", "swiglu");
}

void CudaBackend::enqueue_swiglu_ffn(const cuda::bf16* gate_up, const cuda::bf16* down, int inter,
                                     int m, float* out, bool accumulate, const char* gemm_op,
                                     const char* swiglu_op) {
  const int h = static_cast<int>(config_.hidden_size);
  op_begin(gemm_op);
  cuda::gemm_nt(lane_->cublas, lane_->xn.get(), gate_up, lane_->gu.get(), CUDA_R_16BF, m, 2 * inter,
                h, false);
  op_end();
  op_begin(swiglu_op);
  cuda::swiglu(lane_->gu.get(), lane_->act.get(), m, inter, lane_->stream);
  op_end();
  op_begin(gemm_op);
  cuda::gemm_nt(lane_->cublas, lane_->act.get(), down, out, CUDA_R_32F, m, h, inter, accumulate);
  op_end();
}

}  // namespace dllm::cuda_backend
