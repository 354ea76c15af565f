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
#include "backend/cuda/device_query.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl_launch.h"

namespace dllm::cuda {

namespace {

namespace L = batch_layout;
using ptx::wait_for_primary_grid;

// Merges the splits of every (query row, head) of the batch, one warp each: row b = t heads + h
// of query row t (rows past the plan's count: none), combine_warps() of them per block. Every
// thread waits for the attention kernel first, so the call's kernels complete in order.
static_assert(L::kMaxSplits <= kWarpCombineMaxSplits);

template <int V>  // head_dim / 16
__global__ void __launch_bounds__(256) combine_batch_kernel(AttentionBatchKernelArgs a) {
  extern __shared__ float weight[];  // [warps][kWarpCombineMaxSplits]
  const int warp = threadIdx.x >> 5;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp;
  const int32_t* plan = a.plan;
  const int t = static_cast<int>(b / a.heads), h = static_cast<int>(b % a.heads);
  const bool real = t < plan[L::kQRows];
  const int32_t* d =
      real ? plan + plan[L::kSeqsAt] + plan[plan[L::kRowSeqAt] + t] * L::kSeqInts : plan;
  wait_for_primary_grid();
  if (!real) return;
  const int group = a.heads / a.kv_heads;
  const int R = d[L::kNQ] * group;
  const int g = h / group, r = (t - d[L::kQRow]) * group + h % group;
  const int64_t row = d[L::kPartialRow] + static_cast<int64_t>(g) * R + r;
  constexpr int D = 16 * V;
  combine_row_warp<V>(a.partial_ml + row * 2, a.partial_o + row * D,
                      static_cast<int64_t>(a.kv_heads) * R, d[L::kSplits],
                      a.out + (static_cast<int64_t>(t) * a.heads + h) * D,
                      weight + warp * kWarpCombineMaxSplits);
}

void launch_combine(const AttentionBatchKernelArgs& a, int q_rows, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(q_rows) * a.heads;
  const int warps = combine_warps(rows, device_sm_count());
  const dim3 grid(static_cast<unsigned>((rows + warps - 1) / warps)), block(warps * 32);
  const size_t smem = warps * kWarpCombineMaxSplits * sizeof(float);
  auto launch = [&](auto* kernel) { launch_pdl(kernel, grid, block, smem, stream, a); };
  switch (a.head_dim) {
    case 16:
      launch(combine_batch_kernel<1>);
      break;
    case 32:
      launch(combine_batch_kernel<2>);
      break;
    case 64:
      launch(combine_batch_kernel<4>);
      break;
    default:
      launch(combine_batch_kernel<8>);
      break;
  }
  DLLM_CUDA_LAUNCH_CHECK();
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
  return L::kMergeCounters + attention_partial_ml_floats(rows) + (rows * head_dim + 1) / 2;
}

bool attention_batch_workspace_ensure(DeviceBuffer<float>& workspace, size_t floats,
                                      cudaStream_t stream) {
  if (!workspace.ensure(floats, "batched attention workspace")) return false;
  DLLM_CUDA_CHECK(cudaMemsetAsync(workspace.get(), 0, L::kMergeCounters * sizeof(int32_t), stream));
  return true;
}

bool attention_batch_merges(const AttentionBatchParams& p) {
#ifdef DLLM_HAVE_SM90A
  return sm90_attention_batch_merges(p.capacity, p.shape.kv_heads);
#else
  (void)p;
  return false;
#endif
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
  a.counters = reinterpret_cast<int32_t*>(p.workspace);
  a.partial_ml = p.workspace + L::kMergeCounters;
  a.partial_o = reinterpret_cast<bf16*>(
      a.partial_ml +
      attention_partial_ml_floats(static_cast<size_t>(std::max<int64_t>(c.partial_rows, 1))));
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
  const bool merged = attention_batch_merges(p);
  if (c.sm90_items > 0) {
#ifdef DLLM_HAVE_SM90A
    sm90_attention_batch(a, c.sm90_items, merged, stream);
#else
    fail("attention_batch: Hopper work items in a build without sm_90a");
#endif
  }
  if (merged) return;  // the Hopper kernel merged every row (no other kernel ran)
  // One combine warp per (query row, head), scheduled while the last attention blocks finish.
  launch_combine(a, c.q_rows, stream);
}

}  // namespace dllm::cuda
