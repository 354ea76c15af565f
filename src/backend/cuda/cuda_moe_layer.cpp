// The MoE FFN of a layer (LLaDA2.x): router, dispatch by expert, the routed experts' grouped
// GEMMs and the weighted combine, with the shared expert riding in the grouped GEMMs as one more
// expert over every row.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm.h"

namespace dllm::cuda_backend {

void CudaBackend::enqueue_moe(int64_t li, int m, float* out, bool accumulate) {
  const MoeConfig& c = desc_[static_cast<size_t>(li)].moe;
  CudaLayer& L = layers_[static_cast<size_t>(li)];
  const int h = static_cast<int>(config_.hidden_size);
  const int experts = static_cast<int>(c.num_experts), k = static_cast<int>(c.experts_per_token),
            ie = static_cast<int>(c.expert_intermediate_size),
            held = static_cast<int>(c.held_count());
  // The shared expert has a routed expert's width unless a tensor-parallel split gave this rank
  // another share of its features: then it runs as a dense FFN of its own.
  const int shared = static_cast<int>(c.shared_intermediate_size());
  const bool shared_in_gemm = shared == ie && held < 1024;
  if (shared > 0 && !shared_in_gemm) {
    enqueue_swiglu_ffn(L.gate_up.get(), L.down.get(), shared, m, out, accumulate,
                       "moe shared expert", "moe shared expert");
    accumulate = true;
  }
  op_begin("moe router");
  // Router logits in fp32 from the bf16 rows and weights (the reference's fp32 linear of the
  // same values, accumulated in fp32).
  cuda::gemm_nt(lane_->cublas, lane_->xn.get(), L.router.get(), lane_->router_logits.get(),
                CUDA_R_32F, m, experts, h, false);
  cuda::MoeRouteParams rp;
  rp.logits = lane_->router_logits.get();
  rp.expert_bias = c.expert_bias ? L.expert_bias.get() : nullptr;
  rp.experts_out = lane_->moe_experts.get();
  rp.weights_out = lane_->moe_weights.get();
  rp.n = m;
  rp.experts = experts;
  rp.groups = static_cast<int>(c.num_groups);
  rp.groups_per_token = static_cast<int>(c.groups_per_token);
  rp.top_k = k;
  rp.scaling = static_cast<float>(c.routed_scaling_factor);
  cuda::moe_route(rp, lane_->stream);
  op_end();
  op_begin("moe sort");
  cuda::moe_sort(lane_->moe_experts.get(), m, k, static_cast<int>(c.first_held_expert), held,
                 shared_in_gemm, lane_->moe_offsets.get(), lane_->moe_order.get(),
                 lane_->moe_position.get(), lane_->moe_work.get(), lane_->moe_sort_scratch.get(),
                 lane_->stream);
  op_end();
  if (profiling_) count_moe_touched();  // (profiled steps run without graphs)
  op_begin("moe experts gate_up+swiglu");
  cuda::MoeGemmParams gp;
  gp.in = lane_->xn.get();
  gp.order = lane_->moe_order.get();
  gp.top_k = k;
  gp.offsets = lane_->moe_offsets.get();
  gp.work = lane_->moe_work.get();
  gp.assignments = m * k;
  gp.w = L.expert_gate_up.get();
  gp.experts = held;
  gp.n_out = 2 * ie;
  gp.k = h;
  gp.extra_w = shared_in_gemm ? L.gate_up.get() : nullptr;
  gp.extra_rows = shared_in_gemm ? m : 0;
  gp.out = lane_->moe_act.get();
  gp.out_f32 = false;
  gp.swiglu = true;
  cuda::moe_grouped_gemm(gp, lane_->stream);
  op_end();
  op_begin("moe experts down");
  gp.in = lane_->moe_act.get();
  gp.order = nullptr;
  gp.w = L.expert_down.get();
  gp.n_out = h;
  gp.k = ie;
  gp.extra_w = shared_in_gemm ? L.down.get() : nullptr;
  gp.out = lane_->moe_y.get();
  gp.out_f32 = true;
  gp.swiglu = false;
  cuda::moe_grouped_gemm(gp, lane_->stream);
  op_end();
  op_begin("moe combine");
  cuda::moe_combine(lane_->moe_y.get(), lane_->moe_position.get(), lane_->moe_weights.get(), m, k,
                    h, shared_in_gemm, out, accumulate, lane_->stream);
  op_end();
}

}  // namespace dllm::cuda_backend
