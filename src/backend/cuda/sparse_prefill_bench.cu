// `dllm bench --sparse-prefill-kernel`: the sparse prefill kernel alone on one layer's shapes
// (cli/sparse_prefill_bench.cpp builds the plans).
#include <cmath>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sparse_prefill.h"
#include "backend/cuda/time_calls.h"

namespace dllm {

double time_cuda_sparse_prefill(const SparsePrefillPlan& plan, int heads, int kv_heads,
                                int head_dim, int reps) {
  if (reps <= 0 || static_cast<int>(plan.heads.size()) != heads)
    fail("time_cuda_sparse_prefill: ", reps, " reps, plan of ", plan.heads.size(), " heads for ",
         heads);
  const int64_t n = plan.n_tokens;
  const int64_t q_elems = n * heads * head_dim, kv_elems = n * kv_heads * head_dim;
  cuda::DeviceBuffer<cuda::bf16> q(q_elems, "queries"), k(kv_elems, "keys"), v(kv_elems, "values"),
      out(q_elems, "output");
  cuda::fill_random_bf16(q.get(), q_elems, 5, nullptr);
  cuda::fill_random_bf16(k.get(), kv_elems, 11, nullptr);
  cuda::fill_random_bf16(v.get(), kv_elems, 71, nullptr);
  const cuda::DeviceSparsePlan dplan = cuda::upload_sparse_plan(plan);
  auto call = [&](int) {
    cuda::sparse_prefill_attention(dplan, q.get(), k.get(), v.get(), heads, kv_heads, head_dim,
                                   out.get(), nullptr);
  };
  return cuda::time_calls(call, 1, reps);
}

}  // namespace dllm
