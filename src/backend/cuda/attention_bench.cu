// `dllm bench --attention-kernel`: the attention kernel alone (key splits + combine, whichever
// kernel the dispatch picks) on one layer's shapes, as the peer times PyTorch SDPA alone; with
// --attention-batch, the batched paged call over many sequences.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/time_calls.h"

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
  return cuda::time_calls(call, copies, reps);
}

namespace {

// time_cuda_attention_batch() with each sequence's rule given: `kind` with `block_size`.
double time_batch(int seqs, int n_q, int context, int heads, int kv_heads, int head_dim,
                  int page_size, int reps, cuda::MaskKind kind, int block_size) {
  if (seqs <= 0 || n_q <= 0 || context < 0 || heads <= 0 || kv_heads <= 0 ||
      heads % kv_heads != 0 || reps <= 0)
    fail("time_cuda_attention_batch: bad shape (", seqs, " sequences of ", n_q,
         " queries, context ", context, ", ", heads, "/", kv_heads, " heads, ", reps, " reps)");
  const int n_keys = context + n_q;
  const int pages_per_seq = (n_keys + page_size - 1) / page_size;
  const int64_t pages = int64_t{seqs} * pages_per_seq;
  const int64_t slots = pages * page_size;
  const int64_t kv_elems = slots * kv_heads * head_dim;
  // As time_cuda_attention_kernel: enough pool copies that no call finds its K/V in L2.
  const int copies =
      static_cast<int>(std::clamp<int64_t>((256ll << 20) / (4 * kv_elems) + 1, 2, 64));
  std::vector<cuda::DeviceBuffer<cuda::bf16>> k(copies), v(copies);
  for (int i = 0; i < copies; ++i) {
    k[i].resize(static_cast<size_t>(kv_elems), "benchmark keys");
    v[i].resize(static_cast<size_t>(kv_elems), "benchmark values");
    cuda::fill_random_bf16(k[i].get(), kv_elems, 11 + i, nullptr);
    cuda::fill_random_bf16(v[i].get(), kv_elems, 71 + i, nullptr);
  }
  // Pages shuffled over the pool; logical position = logical slot.
  std::vector<int32_t> page_of(pages);
  std::iota(page_of.begin(), page_of.end(), 0);
  std::shuffle(page_of.begin(), page_of.end(), std::mt19937(7));
  std::vector<int32_t> slot_pos(slots), q_pos;
  std::vector<cuda::AttentionBatchSeq> descs(seqs);
  for (int s = 0; s < seqs; ++s) {
    std::span<const int32_t> table(&page_of[int64_t{s} * pages_per_seq], pages_per_seq);
    for (int j = 0; j < n_keys; ++j)
      slot_pos[int64_t{table[j / page_size]} * page_size + j % page_size] = j;
    for (int i = 0; i < n_q; ++i) q_pos.push_back(context + i);
    descs[s].n_q = n_q;
    descs[s].n_keys = n_keys;
    descs[s].page_table = table;
    descs[s].kind = kind;
    descs[s].block_size = block_size;
    descs[s].keys_at_positions = context == 0;  // a cold prefill, as the forward marks it
  }
  cuda::AttentionBatchShape shape{
      heads, kv_heads, head_dim, page_size, slots, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  std::vector<int32_t> staging;
  const auto plan = cuda::attention_batch_plan(descs, shape, staging);
  cuda::DeviceBuffer<int32_t> dplan(staging.size(), "plan"), dslot_pos(slots, "slot positions"),
      dq_pos(q_pos.size(), "query positions");
  DLLM_CUDA_CHECK(
      cudaMemcpy(dplan.get(), staging.data(), staging.size() * 4, cudaMemcpyHostToDevice));
  DLLM_CUDA_CHECK(cudaMemcpy(dslot_pos.get(), slot_pos.data(), slots * 4, cudaMemcpyHostToDevice));
  DLLM_CUDA_CHECK(cudaMemcpy(dq_pos.get(), q_pos.data(), q_pos.size() * 4, cudaMemcpyHostToDevice));
  const int64_t q_elems = int64_t{seqs} * n_q * heads * head_dim;
  cuda::DeviceBuffer<cuda::bf16> q(static_cast<size_t>(q_elems), "queries"),
      out(static_cast<size_t>(q_elems), "attention output");
  cuda::fill_random_bf16(q.get(), q_elems, 5, nullptr);
  cuda::DeviceBuffer<float> ws;
  cuda::attention_batch_workspace_ensure(
      ws, cuda::attention_batch_workspace_floats(plan.need.partial_rows, head_dim), nullptr);
  cuda::AttentionBatchParams p;
  p.q = q.get();
  p.slot_positions = dslot_pos.get();
  p.q_positions = dq_pos.get();
  p.plan = dplan.get();
  p.workspace = ws.get();
  p.out = out.get();
  p.shape = shape;
  p.capacity = plan.need;
  return cuda::time_calls(
      [&](int i) {
        p.k_pool = k[i % copies].get();
        p.v_pool = v[i % copies].get();
        cuda::attention_batch(p, nullptr);
      },
      copies, reps);
}

}  // namespace

double time_cuda_attention_batch(int seqs, int n_q, int context, int heads, int kv_heads,
                                 int head_dim, int page_size, int reps) {
  return time_batch(seqs, n_q, context, heads, kv_heads, head_dim, page_size, reps,
                    cuda::MaskKind::kBlockCausal, n_q);
}

double time_cuda_dense_prefill(int n, int block_size, int heads, int kv_heads, int head_dim,
                               int reps) {
  if (block_size < 1)
    fail("time_cuda_dense_prefill: block size must be >= 1 (got ", block_size, ")");
  return time_batch(1, n, 0, heads, kv_heads, head_dim, 16, reps,
                    block_size == 1 ? cuda::MaskKind::kCausal : cuda::MaskKind::kBlockCausal,
                    block_size);
}

}  // namespace dllm
