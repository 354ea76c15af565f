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

// The combine pass merges the splits of the plan's combine rows (sequences whose kernel does not
// merge them itself), per (row, head): combine row b / heads of the list, head b % heads. Every
// thread waits for the attention kernels first, so the call's kernels complete in order; what it
// reads of the plan it reads before, while the attention kernels still run.
static_assert(L::kMaxSplits <= kWarpCombineMaxSplits);

struct CombineRow {
  const float* ml;  // split 0 of the row's partials
  const bf16* po;
  int64_t stride;  // rows from one split to the next
  int splits;
  bf16* out;
};

// Combine row idx of the list, head h; false past the plan's count.
__device__ __forceinline__ bool combine_row_of(const AttentionBatchKernelArgs& a, int64_t idx,
                                               int h, CombineRow& c) {
  const int32_t* plan = a.plan;
  if (idx >= plan[L::kCombineRows]) return false;
  const int32_t* entry = plan + plan[L::kCombineAt] + 2 * idx;
  const int t = entry[0];
  const int32_t* d = plan + plan[L::kSeqsAt] + entry[1] * L::kSeqInts;
  const int group = a.heads / a.kv_heads;
  const int R = d[L::kNQ] * group;
  const int g = h / group, r = (t - d[L::kQRow]) * group + h % group;
  const int64_t row = d[L::kPartialRow] + static_cast<int64_t>(g) * R + r;
  c.ml = a.partial_ml + row * 2;
  c.po = a.partial_o + row * a.head_dim;
  c.stride = static_cast<int64_t>(a.kv_heads) * R;
  c.splits = d[L::kSplits];
  c.out = a.out + (static_cast<int64_t>(t) * a.heads + h) * a.head_dim;
  return true;
}

// One warp per (row, head), combine_warps() of them per block: many rows.
template <int V>  // head_dim / 16
__global__ void __launch_bounds__(256, 4) combine_batch_kernel(AttentionBatchKernelArgs a) {
  extern __shared__ float weight[];  // [warps][kWarpCombineMaxSplits]
  const int warp = threadIdx.x >> 5;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp;
  CombineRow c;
  const bool real = combine_row_of(a, b / a.heads, static_cast<int>(b % a.heads), c);
  wait_for_primary_grid();
  if (!real) return;
  combine_row_warp<V>(c.ml, c.po, c.stride, c.splits, c.out, weight + warp * kWarpCombineMaxSplits);
}

// One block per (row, head): few rows, each with many splits (a lone sequence of a few queries
// over a long cache), whose loads one warp would issue a few at a time. Measured with the
// single-sequence attention() on the H100 (4 queries at 32K, 128 rows x 99 splits): 64.2 µs a
// call with a block per row, 75.7 with a warp per row.
__global__ void __launch_bounds__(kCombineThreads)
    combine_batch_block_kernel(AttentionBatchKernelArgs a) {
  __shared__ float weight[2 * combine_weight_slots(L::kMaxSplits)];  // w_s, then m_s
  __shared__ CombineScratch scratch;
  CombineRow c;
  const bool real =
      combine_row_of(a, blockIdx.x / a.heads, static_cast<int>(blockIdx.x % a.heads), c);
  wait_for_primary_grid();
  if (!real) return;
  combine_row(c.ml, c.po, c.stride, c.splits, a.head_dim, c.out, weight,
              weight + combine_weight_slots(c.splits), scratch);
}

void launch_combine(const AttentionBatchKernelArgs& a, int q_rows, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(q_rows) * a.heads;
  if (rows <= 2 * device_sm_count()) {  // as attention(): a block per row where rows are few
    launch_pdl(combine_batch_block_kernel, dim3(static_cast<unsigned>(rows)), dim3(kCombineThreads),
               0, stream, a);
    DLLM_CUDA_LAUNCH_CHECK();
    return;
  }
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

// The mma.sync kernel's two pipelines (same tiles, so the same bits): two stages where the grid
// is bigger than what the deep one keeps resident (six one-warp blocks per SM share the loads in
// flight), four stages where it fits at once (a lone sequence or a few: each block then has three
// tiles in flight instead of one; see deep_pipeline()).
template <int D, int STAGES, bool PREFIX = false>
auto* mma_batch_kernel() {
  return flash_attention_batch_kernel<D, L::kMmaWarps, L::kMmaTileKeys, 1, STAGES, PREFIX>;
}
template <int D, int STAGES>
constexpr size_t kMmaBatchSmem = smem_bytes<D, L::kMmaTileKeys, L::kMmaWarps, STAGES>();
constexpr int kMmaDeepStages = 4;

template <int D, int STAGES>
int mma_resident() {
  static PerDevice<int> resident_on;
  return resident_on.get([] {
    DLLM_CUDA_CHECK(cudaFuncSetAttribute(mma_batch_kernel<D, STAGES>(),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kMmaBatchSmem<D, STAGES>)));
    int n = 0;
    DLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, mma_batch_kernel<D, STAGES>(), L::kMmaWarps * 32, kMmaBatchSmem<D, STAGES>));
    return std::max(n, 1);
  });
}

// Whether a grid of `blocks` blocks runs the deep pipeline of `resident` blocks per SM: all of
// it resident at once. Decided from the capacity, so a captured graph keeps its choice.
bool deep_pipeline(int64_t blocks, int resident) {
  static const bool enabled = env_switch_on("DLLM_ATTN_BATCH_DEEP");
  return enabled && blocks <= static_cast<int64_t>(resident) * device_sm_count();
}

template <int D>
void launch_mma(AttentionBatchKernelArgs a, int items, cudaStream_t stream) {
  const dim3 grid = attention_batch_grid(items, a), block(L::kMmaWarps * 32);
  // MAGE's selecting step (a hand-over): two stages (the same bits as four)
  if (a.prefix_ml || a.prefix_scores) {
    static_assert(kMmaBatchSmem<D, 2> <= 48 * 1024, "no shared-memory attribute to set");
    launch_pdl(mma_batch_kernel<D, 2, true>(), grid, block, kMmaBatchSmem<D, 2>, stream, a);
  } else if (deep_pipeline(int64_t{items} * a.kv_heads, mma_resident<D, kMmaDeepStages>())) {
    launch_pdl(mma_batch_kernel<D, kMmaDeepStages>(), grid, block, kMmaBatchSmem<D, kMmaDeepStages>,
               stream, a);
  } else {
    mma_resident<D, 2>();  // sets the shared-memory limit once
    launch_pdl(mma_batch_kernel<D, 2>(), grid, block, kMmaBatchSmem<D, 2>, stream, a);
  }
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace

// KV heads inner: the blocks of one work item start side by side. A pool slot holds every KV
// head's K (and V) row, so one block reads 256 of every 2048 bytes (128 dims, 8 KV heads); with
// the items inner, the blocks running at once were nearly all of one KV head, and each DRAM row
// opened served one eighth of itself. The grid's y is at most 65535: more items than that keep
// the items inner.
dim3 attention_batch_grid(int items, AttentionBatchKernelArgs& a) {
  static const bool enabled = env_switch_on("DLLM_ATTN_BATCH_HEADS_INNER");
  a.heads_inner = enabled && items <= 65535;
  return a.heads_inner ? dim3(a.kv_heads, static_cast<unsigned>(items))
                       : dim3(static_cast<unsigned>(items), a.kv_heads);
}

int attention_batch_mma_resident_blocks(int head_dim) {
  switch (head_dim) {
    case 16:
      return mma_resident<16, 2>();
    case 32:
      return mma_resident<32, 2>();
    case 64:
      return mma_resident<64, 2>();
    case 128:
      return mma_resident<128, 2>();
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
  if (c.prefix_rows > 0 && !p.prefix_ml)
    fail("attention_batch: a prefix_lse sequence needs prefix_ml (", c.prefix_rows, " rows)");
  a.prefix_ml = c.prefix_rows > 0 ? p.prefix_ml : nullptr;
  if (c.prefix_score_floats > 0 && !p.prefix_scores)
    fail("attention_batch: score_queries need prefix_scores (", c.prefix_score_floats, " floats)");
  a.prefix_scores = c.prefix_score_floats > 0 ? p.prefix_scores : nullptr;
  a.heads = s.heads;
  a.kv_heads = s.kv_heads;
  a.head_dim = s.head_dim;
  a.page_shift = page_shift_of(s.page_size);
  a.scale = s.scale;
  a.ws_block_causal = c.ws_block_causal;
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
  if (c.sm90_ws_items > 0) {  // split blocks among them: the combine pass merges them
#ifdef DLLM_HAVE_SM90A
    sm90_ws_attention_batch(a, c.sm90_ws_items, stream);
#else
    fail("attention_batch: warp-specialised Hopper work items in a build without sm_90a");
#endif
  }
  if (merged) return;      // the Hopper kernel merged every row (no other kernel ran)
  if (!c.combine) return;  // every sequence of several splits is a serial item: merged already
  // One combine warp per (query row, head), scheduled while the last attention blocks finish.
  launch_combine(a, c.q_rows, stream);
}

}  // namespace dllm::cuda
