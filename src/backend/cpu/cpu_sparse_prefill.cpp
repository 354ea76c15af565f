// The CPU backend's MMInference sparse prefill (SequenceForward::sparse_prefill): per layer and
// query head the config's pattern, its plan built from this layer's queries and keys, executed
// by the fp32 executor (sparse_prefill_cpu.h).
#include <algorithm>

#include "attention/sparse_prefill_layer.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/sparse_prefill_cpu.h"
#include "backend/forward_positions.h"

namespace dllm::cpu_backend {

namespace {

// A prefill from position 0 whose keys are exactly its own queries, in order.
bool is_cold_prefill(const SequenceRun& run) {
  const SequenceForward& seq = *run.seq;
  if (run.key_slots.size() != seq.tokens.size() || run.active.size() != seq.tokens.size())
    return false;
  return positions_from_zero(seq.positions);
}

}  // namespace

void CpuBackend::keep_layer_qk(int64_t layer, const SequenceRun& run,
                               std::span<const float* const> krows, const float* q,
                               SequenceResult& result) const {
  const int64_t n = static_cast<int64_t>(run.seq->tokens.size());
  const int64_t qd = config_.q_dim(), kvd = config_.kv_dim();
  if (result.layer_q.empty()) {
    result.layer_q.resize(static_cast<size_t>(config_.num_layers * n * qd));
    result.layer_k.resize(static_cast<size_t>(config_.num_layers * n * kvd));
  }
  std::copy_n(q, n * qd, &result.layer_q[static_cast<size_t>(layer * n * qd)]);
  const size_t first_query_key = krows.size() - static_cast<size_t>(n);  // [visible | queries]
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(krows[first_query_key + static_cast<size_t>(i)], kvd,
                &result.layer_k[static_cast<size_t>((layer * n + i) * kvd)]);
}

bool CpuBackend::attend_sparse_prefill(int64_t layer, const SequenceRun& run,
                                       std::span<const float* const> krows,
                                       std::span<const float* const> vrows, const float* q,
                                       float* out) const {
  const SparsePrefillRequest& req = *run.seq->sparse_prefill;
  const ModelConfig& c = config_;
  const int heads = static_cast<int>(c.num_heads), kv_heads = static_cast<int>(c.num_kv_heads);
  const int hd = static_cast<int>(c.head_dim);
  const std::vector<HeadPattern> patterns = layer_patterns(req, static_cast<int>(layer), heads);
  if (!is_cold_prefill(run) || all_dense(patterns)) return false;
  const int32_t n = static_cast<int32_t>(run.seq->tokens.size());
  const int64_t kvd = c.kv_dim();
  std::vector<float> k(static_cast<size_t>(n * kvd)), v(k.size());
  for (int32_t j = 0; j < n; ++j) {
    std::copy_n(krows[static_cast<size_t>(j)], kvd, &k[static_cast<size_t>(j * kvd)]);
    std::copy_n(vrows[static_cast<size_t>(j)], kvd, &v[static_cast<size_t>(j * kvd)]);
  }
  const int32_t block_size = run.seq->rule.kind == AttentionKind::kBlockCausal
                                 ? static_cast<int32_t>(run.seq->rule.block_size)
                                 : 1;
  const SparsePrefillPlan plan =
      build_layer_plan(patterns, prefill_layout(req, n, block_size), q, k.data(), kv_heads, hd);
  sparse_prefill_attention_cpu(plan, q, k.data(), v.data(), heads, kv_heads, hd, out);
  return true;
}

}  // namespace dllm::cpu_backend
