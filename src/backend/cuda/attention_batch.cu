// Batched paged attention (kernels.h: attention_batch): the launches of one call — the mma.sync
// kernel over its work list, the Hopper kernel over its own, then one combine pass over every
// query row — with grids from the caller's capacities and everything else read from the plan.
#include <algorithm>

#include "backend/cuda/attention_batch_layout.h"
#include "backend/cuda/attention_dispatch.h"
#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_sm90.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl_launch.h"

namespace dllm::cuda {

namespace {

namespace L = batch_layout;
using ptx::wait_for_primary_grid;

// Merges the splits of query row blockIdx.x, head blockIdx.y (rows past the plan's count: none).
// Padding blocks also wait for the attention kernel before they exit: a kernel whose blocks all
// waited completes after the kernel before it, so the call's kernels complete in order.
__global__ void __launch_bounds__(kCombineThreads) combine_batch_kernel(AttentionBatchKernelArgs a) {
  __shared__ float weight[2 * L::kMaxSplits];  // w_s, then m_s
  __shared__ float scratch[kCombineThreads / 32];
  const int32_t* plan = a.plan;
  const int t = blockIdx.x, h = blockIdx.y;
  if (t >= plan[L::kQRows]) {
    wait_for_primary_grid();
    return;
  }
  const int32_t* d = plan + plan[L::kSeqsAt] + plan[plan[L::kRowSeqAt] + t] * L::kSeqInts;
  const int group = a.heads / a.kv_heads;
  const int R = d[L::kNQ] * group;
  const int g = h / group, r = (t - d[L::kQRow]) * group + h % group;
  const int64_t row = d[L::kPartialRow] + static_cast<int64_t>(g) * R + r;
  const int D = a.head_dim;
  wait_for_primary_grid();
  combine_row(a.partial_ml + row * 2, a.partial_o + row * D, static_cast<int64_t>(a.kv_heads) * R,
              d[L::kSplits], D, a.out + (static_cast<int64_t>(t) * a.heads + h) * D, weight,
              weight + L::kMaxSplits, scratch);
}

template <int D>
auto* mma_batch_kernel() {
  return flash_attention_batch_kernel<D, L::kMmaWarps, L::kMmaTileKeys, 1>;
}
template <int D>
constexpr size_t kMmaBatchSmem = smem_bytes<D, L::kMmaTileKeys, L::kMmaWarps>();

template <int D>
int mma_resident() {
  static const int resident = [] {
    DLLM_CUDA_CHECK(cudaFuncSetAttribute(mma_batch_kernel<D>(),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kMmaBatchSmem<D>)));
    int n = 0;
    DLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, mma_batch_kernel<D>(), L::kMmaWarps * 32, kMmaBatchSmem<D>));
    return std::max(n, 1);
  }();
  return resident;
}

template <int D>
void launch_mma(const AttentionBatchKernelArgs& a, int items, cudaStream_t stream) {
  mma_resident<D>();  // sets the shared-memory limit once
  launch_pdl(mma_batch_kernel<D>(), dim3(static_cast<unsigned>(items), a.kv_heads),
             dim3(L::kMmaWarps * 32), kMmaBatchSmem<D>, stream, a);
  DLLM_CUDA_LAUNCH_CHECK();
}

int log2_exact(int v) {
  int s = 0;
  while ((1 << s) < v) ++s;
  return s;
}

}  // namespace

int attention_batch_mma_resident_blocks(int head_dim) {
  switch (head_dim) {
    case 16:
      return mma_resident<16>();
    case 32:
      return mma_resident<32>();
    case 64:
      return mma_resident<64>();
    case 128:
      return mma_resident<128>();
    default:
      fail("CUDA attention supports head_dim 16, 32, 64 and 128 (got ", head_dim, ")");
  }
}

size_t attention_batch_workspace_floats(int64_t partial_rows, int head_dim) {
  const size_t rows = static_cast<size_t>(std::max<int64_t>(partial_rows, 1));
  return attention_partial_ml_floats(rows) + (rows * head_dim + 1) / 2;
}

void attention_batch(const AttentionBatchParams& p, cudaStream_t stream) {
  const AttentionBatchShape& s = p.shape;
  const AttentionBatchCapacity& c = p.capacity;
  if (c.q_rows <= 0) return;
  if (!p.plan || !p.workspace) fail("attention_batch: plan and workspace are required");
  AttentionBatchKernelArgs a;
  a.q = p.q;
  a.k_pool = p.k_pool;
  a.v_pool = p.v_pool;
  a.slot_positions = p.slot_positions;
  a.q_positions = p.q_positions;
  a.plan = p.plan;
  a.partial_ml = p.workspace;
  a.partial_o = reinterpret_cast<bf16*>(
      p.workspace + attention_partial_ml_floats(static_cast<size_t>(std::max<int64_t>(c.partial_rows, 1))));
  a.out = p.out;
  a.heads = s.heads;
  a.kv_heads = s.kv_heads;
  a.head_dim = s.head_dim;
  a.page_shift = log2_exact(s.page_size);
  a.scale = s.scale;
  if (c.mma_items > 0) {
    switch (s.head_dim) {
      case 16:
        launch_mma<16>(a, c.mma_items, stream);
        break;
      case 32:
        launch_mma<32>(a, c.mma_items, stream);
        break;
      case 64:
        launch_mma<64>(a, c.mma_items, stream);
        break;
      case 128:
        launch_mma<128>(a, c.mma_items, stream);
        break;
      default:
        fail("CUDA attention supports head_dim 16, 32, 64 and 128 (got ", s.head_dim, ")");
    }
  }
  if (c.sm90_items > 0) {
#ifdef DLLM_HAVE_SM90A
    sm90_attention_batch(a, c.sm90_items, stream);
#else
    fail("attention_batch: Hopper work items in a build without sm_90a");
#endif
  }
  // One combine block per (query row, head), scheduled while the last attention blocks finish.
  launch_pdl(combine_batch_kernel, dim3(static_cast<unsigned>(c.q_rows), s.heads),
             dim3(kCombineThreads), 0, stream, a);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
