// MMInference sparse prefill in the CUDA forward (method-specs §2, docs/mminference.md): the CPU
// backend's cpu_sparse_prefill.cpp is the reference; this is the same contract on the device.
//   - A sequence carrying a SparsePrefillRequest whose forward is a cold prefill (positions
//     0..n-1, nothing cached before it: its keys are exactly its queries) is planned here at
//     prepare: per layer, whether some head of the config's patterns is sparse.
//   - In those layers the batched attention skips its rows (AttentionBatchSeq::
//     attended_elsewhere; the layer's plan is one of ForwardPlan::layer_attentions) and the
//     sparse prefill kernel (sparse_prefill.h) writes them, reading K / V from the pool through
//     the sequence's physical slots. Layers whose heads are all dense attend as any forward.
//   - Plans are built on the host by the same code as the CPU's (attention/sparse_prefill_layer.h).
//     Patterns with online estimation (vertical-slash, block-sparse, grid search, the boundary
//     forms) read the layer's bf16 Q and K back to the host first: one sync per such layer.
//     Estimating on the device (the last 64 queries' scores) is the next step; the host
//     estimation costs O(last_q x n x d) per head and the Q/K copy n x (q_dim + kv_dim) x 2 bytes.
// A sparse-prefill forward is never captured as a CUDA graph (its plans depend on the data).
#include <algorithm>

#include "attention/sparse_prefill_layer.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sparse_prefill.h"
#include "core/dtype.h"

namespace dllm::cuda_backend {

namespace {

int32_t block_size_of(const SequenceForward& seq) {
  return seq.rule.kind == AttentionKind::kBlockCausal ? static_cast<int32_t>(seq.rule.block_size)
                                                      : 1;
}

std::vector<float> to_f32(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  std::transform(bits.begin(), bits.end(), out.begin(), bf16_to_f32);
  return out;
}

}  // namespace

void CudaBackend::plan_sparse_prefill(PlannedSequence& p) {
  const SequenceForward& seq = *p.seq;
  // A cold prefill (the CPU backend's is_cold_prefill): keys are the queries, in order.
  if (!p.cold_prefill) return;
  const int heads = static_cast<int>(config_.num_heads);
  p.sparse_prefill_layers.assign(static_cast<size_t>(config_.num_layers), 0);
  for (int64_t li = 0; li < config_.num_layers; ++li)
    p.sparse_prefill_layers[static_cast<size_t>(li)] =
        all_dense(layer_patterns(*seq.sparse_prefill, static_cast<int>(li), heads)) ? 0 : 1;
}

bool PlannedSequence::sparse_prefill_at(int64_t layer) const {
  return !sparse_prefill_layers.empty() && sparse_prefill_layers[static_cast<size_t>(layer)];
}

void CudaBackend::enqueue_sparse_prefill(const ForwardPlan& plan, int64_t layer) {
  const ModelConfig& c = config_;
  const int heads = static_cast<int>(c.num_heads), kv_heads = static_cast<int>(c.num_kv_heads);
  const int hd = static_cast<int>(c.head_dim);
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  for (const PlannedSequence& p : plan.seqs) {
    if (!p.sparse_prefill_at(layer)) continue;
    const SparsePrefillRequest& req = *p.seq->sparse_prefill;
    const int32_t n = static_cast<int32_t>(p.rows);
    const std::vector<HeadPattern> patterns = layer_patterns(req, static_cast<int>(layer), heads);
    const int32_t* slots = lane_->ints.get() + plan.slots_at + p.row_offset;
    const bf16* q = lane_->q.get() + p.row_offset * qd;
    std::vector<float> qh, kh;
    if (std::any_of(patterns.begin(), patterns.end(), reads_qk)) {
      op_begin("sparse prefill: estimation");
      sp_prefill_k_.ensure(static_cast<size_t>(n * kvd), "sparse prefill keys");
      cuda::gather_rows_bf16(k_pool(layer), slots, sp_prefill_k_.get(), n, static_cast<int>(kvd),
                             lane_->stream);
      std::vector<uint16_t> qb(static_cast<size_t>(n * qd)), kb(static_cast<size_t>(n * kvd));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(qb.data(), q, qb.size() * sizeof(bf16),
                                      cudaMemcpyDeviceToHost, lane_->stream));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(kb.data(), sp_prefill_k_.get(), kb.size() * sizeof(bf16),
                                      cudaMemcpyDeviceToHost, lane_->stream));
      DLLM_CUDA_CHECK(cudaStreamSynchronize(lane_->stream));
      qh = to_f32(qb);
      kh = to_f32(kb);
      op_end();
    }
    const SparsePrefillPlan hp = build_layer_plan(
        patterns, prefill_layout(req, n, block_size_of(*p.seq)), qh.empty() ? nullptr : qh.data(),
        kh.empty() ? nullptr : kh.data(), kv_heads, hd);
    cuda::upload_sparse_plan(hp, sp_prefill_plan_, lane_->stream);
    op_begin("sparse prefill: attention");
    cuda::sparse_prefill_attention(sp_prefill_plan_, q, k_pool(layer), v_pool(layer), heads,
                                   kv_heads, hd, lane_->attn.get() + p.row_offset * qd,
                                   lane_->stream, slots);
    op_end();
  }
}

}  // namespace dllm::cuda_backend
