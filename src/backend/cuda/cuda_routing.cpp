// SequenceForward::want_routing on the GPU: after an MoE layer's router ran, its logits and
// chosen experts come back to the host, where MoeRoutingReport measures each row's closest call
// (backend/moe_routing.h) — what tests need to show that a row the GPU and the CPU routed
// differently was a near-tie. Only such forwards pay the waits (they run without a graph).
#include <numeric>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/moe_routing.h"

namespace dllm::cuda_backend {

namespace {

template <class T>
std::vector<T> to_host(const T* device, size_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  DLLM_CUDA_CHECK(
      cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
  return host;
}

}  // namespace

void CudaBackend::keep_routing(ForwardPlan& plan, int64_t layer, const LayerRows& rows) {
  const MoeConfig& c = desc_[static_cast<size_t>(layer)].moe;
  const CudaLayer& L = layers_[static_cast<size_t>(layer)];
  const auto m = static_cast<size_t>(rows.count), n = static_cast<size_t>(c.num_experts),
             k = static_cast<size_t>(c.experts_per_token);
  const auto logits = to_host(lane_->router_logits.get(), m * n, lane_->stream);
  const auto experts = to_host(lane_->moe_experts.get(), m * k, lane_->stream);
  const auto bias =
      c.expert_bias ? to_host(L.expert_bias.get(), n, lane_->stream) : std::vector<float>{};
  DLLM_CUDA_CHECK(cudaStreamSynchronize(lane_->stream));
  MoeRoutingReport report;
  for (size_t t = 0; t < m; ++t)
    report.add_token(c, std::span(logits).subspan(t * n, n), bias, &experts[t * k]);
  // A sequence's computed rows: all of its rows, or with a dLLM-Cache sequence in the batch its
  // span of the compacted list (a sequence that wants its routing is never one that reuses).
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    if (!plan.seqs[si].seq->want_routing) continue;
    const int64_t first = rows.all ? plan.seqs[si].row_offset : rows.first[si];
    const int64_t count = rows.all ? plan.seqs[si].rows : rows.size[si];
    report.give(first, count, plan.routing[si]);
  }
}

}  // namespace dllm::cuda_backend
