// `dllm bench --attention-kernel`: the attention kernel alone (key splits + combine, whichever
// kernel the dispatch picks) on one layer's shapes, as the peer times PyTorch SDPA alone.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/kernels.h"

namespace dllm {

double time_cuda_attention_kernel(int n_q, int context, int heads, int kv_heads, int head_dim,
                                  int reps) {
  if (n_q <= 0 || context < 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || reps <= 0)
    fail("time_cuda_attention_kernel: bad shape (", n_q, " queries, context ", context, ", ", heads,
         "/", kv_heads, " heads, ", reps, " reps)");
  const int n_keys = context + n_q;
  const int64_t kv_elems = static_cast<int64_t>(n_keys) * kv_heads * head_dim;
  // Enough copies of the layer's K/V (used in turn) that no call finds its keys in the 50 MB L2
  // from the call before: every call reads from DRAM, as a step's 36 layers do.
  const int64_t kv_bytes = 2 * kv_elems * 2;
  const int copies = static_cast<int>(std::clamp<int64_t>((256ll << 20) / kv_bytes + 1, 2, 64));
  std::vector<cuda::DeviceBuffer<cuda::bf16>> k(copies), v(copies);
  for (int i = 0; i < copies; ++i) {
    k[i].resize(static_cast<size_t>(kv_elems), "benchmark keys");
    v[i].resize(static_cast<size_t>(kv_elems), "benchmark values");
    cuda::fill_random_bf16(k[i].get(), kv_elems, 11 + i, nullptr);
    cuda::fill_random_bf16(v[i].get(), kv_elems, 71 + i, nullptr);
  }
  cuda::DeviceBuffer<cuda::bf16> q(static_cast<size_t>(n_q) * heads * head_dim, "queries");
  cuda::DeviceBuffer<cuda::bf16> out(q.size(), "attention output");
  cuda::fill_random_bf16(q.get(), static_cast<int64_t>(q.size()), 5, nullptr);
  // A denoising step: the block's queries at positions context.. see the cache and the block.
  cuda::DeviceBuffer<int32_t> slot_pos(static_cast<size_t>(n_keys), "slot positions");
  cuda::fill_iota(slot_pos.get(), n_keys, nullptr);
  cuda::DeviceBuffer<int32_t> n_keys_dev(1, "key count");
  DLLM_CUDA_CHECK(cudaMemcpy(n_keys_dev.get(), &n_keys, sizeof(int32_t), cudaMemcpyHostToDevice));

  cuda::AttentionParams p;
  p.q = q.get();
  p.n_keys = n_keys_dev.get();
  p.slot_positions = slot_pos.get();
  p.q_positions = slot_pos.get() + context;
  p.kind = cuda::MaskKind::kBlockCausal;
  p.block_size = n_q;
  p.n_q = n_q;
  p.max_keys = n_keys;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.splits =
      cuda::attention_splits(n_q, heads, kv_heads, head_dim, n_keys, cuda::device_sm_count());
  cuda::DeviceBuffer<float> ws;
  cuda::attention_workspace_ensure(
      ws, cuda::attention_workspace_floats(n_q, heads, head_dim, p.splits), nullptr);
  cuda::attention_use_workspace(p, ws.get());
  p.out = out.get();

  auto call = [&](int i) {
    p.k_cache = k[i % copies].get();
    p.v_cache = v[i % copies].get();
    cuda::attention(p, nullptr);
  };
  for (int i = 0; i < copies; ++i) call(i);  // warm-up (kernel attributes, first touches)
  cudaEvent_t start, stop;
  DLLM_CUDA_CHECK(cudaEventCreate(&start));
  DLLM_CUDA_CHECK(cudaEventCreate(&stop));
  DLLM_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < reps; ++i) call(i);
  DLLM_CUDA_CHECK(cudaEventRecord(stop));
  DLLM_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  DLLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e3 / reps;
}

}  // namespace dllm
