// Flash attention for every rule of the forward contract, on bf16 tensor cores (mma.sync
// m16n8k16, sm_80+), fp32 softmax and accumulation.
//
// One block = up to 64 query rows x one KV head x one split of the key range. A "row" is a
// (query, head-of-the-GQA-group) pair, so the K/V tile loaded into shared memory is used by every
// head that shares it. Each warp owns 16 rows. Keys arrive in tiles of 32 or 64 through an
// optional slot list; the mask (attention_mask.cuh) is evaluated per (row, key) from the rule.
// Splits write partial (O / l, max, sum) that a combine pass merges — few query rows over a long
// cache still fill the GPU.
//
// On Hopper, head_dim 128 with 64+ rows per KV head (a 16-32-token block at GQA 4, a prefill)
// goes to the wgmma kernel of attention_sm90.cu instead; it writes the same partials.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "backend/cuda/attention_dispatch.h"
#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_sm90.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl_launch.h"
#include "backend/cuda/per_device.h"

namespace dllm::cuda {

namespace {

using namespace ptx;

constexpr int kMaxSplits = 4096;  // the combine's weights and maxima fit 32 KB of shared memory

// Merges the splits of each row (attention_merge.cuh), one warp per row (up to
// kWarpCombineMaxSplits splits): no block-wide barriers, and each lane's loads go out eight
// splits at a time.
template <int V>  // head_dim / 16
__global__ void __launch_bounds__(256) combine_warp_kernel(AttentionParams p) {
  extern __shared__ float weight[];  // [warps][kWarpCombineMaxSplits]
  const int warp = threadIdx.x >> 5;
  const int group = p.heads / p.kv_heads;
  const int R = p.n_q * group;
  const int row = blockIdx.x * (blockDim.x >> 5) + warp;  // over kv_heads * R: g R + r
  wait_for_primary_grid();  // launched as a programmatic dependent of the attention kernel
  if (row >= p.kv_heads * R) return;
  constexpr int D = 16 * V;
  const int g = row / R, r = row % R;
  const int qi = r / group, h = g * group + r % group;
  combine_row_warp<V>(
      p.partial_ml + static_cast<int64_t>(row) * 2, p.partial_o + static_cast<int64_t>(row) * D,
      static_cast<int64_t>(p.kv_heads) * R, p.splits,
      p.out + (static_cast<int64_t>(qi) * p.heads + h) * D, weight + warp * kWarpCombineMaxSplits);
}

// The same with one block per row, for any number of splits.
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(AttentionParams p) {
  extern __shared__ float weight[];  // [2][combine_weight_slots(splits)]: w_s, then m_s
  __shared__ CombineScratch scratch;
  const int group = p.heads / p.kv_heads;
  const int R = p.n_q * group;
  const int row = blockIdx.x;  // over kv_heads * R: g R + r
  const int D = p.head_dim;
  const int g = row / R, r = row % R;
  const int qi = r / group, h = g * group + r % group;
  // Launched as a programmatic dependent of the attention kernel. (No early trigger of its own:
  // in a step the next kernel is a cuBLAS GEMM, and back-to-back attention calls scheduled early
  // only spread a short-context grid unevenly, 22 -> 25.5 µs at 4K.)
  wait_for_primary_grid();
  combine_row(p.partial_ml + static_cast<int64_t>(row) * 2,
              p.partial_o + static_cast<int64_t>(row) * D, static_cast<int64_t>(p.kv_heads) * R,
              p.splits, D, p.out + (static_cast<int64_t>(qi) * p.heads + h) * D, weight,
              weight + combine_weight_slots(p.splits), scratch);
}

// Warps per block: enough 16-row warps for the rows of one KV head, at most kMaxWarps.
int warps_for(int rows) {
  const int w = (rows + 15) / 16;
  // 8-warp blocks need ~200 registers a thread: one block (8 warps) per SM. 4-warp blocks fit
  // three per SM; two of them share a KV tile through L2.
  return w >= 4 ? 4 : w >= 2 ? 2 : 1;
}
// Keys per tile: blocks of few warps use 32-key tiles, half the shared memory, so that more of
// them fit on an SM and more loads are in flight (decoding a small block over a long cache).
int tile_keys_for(int warps) {
  return warps <= 2 ? 32 : 64;
}

// Raises the dynamic shared-memory limit of one instantiation (once) and returns how many of its
// blocks fit on an SM.
template <int D, int WARPS, int KT, int MIN_BLOCKS>
int configure() {
  static PerDevice<int> resident_on;
  const int resident = resident_on.get([] {
    constexpr int smem = static_cast<int>(smem_bytes<D, KT, WARPS>());
    auto* kernel = flash_attention_kernel<D, WARPS, KT, MIN_BLOCKS>;
    DLLM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int n = 0;
    DLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, WARPS * 32, smem));
    return std::max(n, 1);
  });
  return resident;
}

template <int D, int WARPS, int KT, int MIN_BLOCKS>
void launch_warps(const AttentionParams& p, cudaStream_t stream) {
  const int R = p.n_q * (p.heads / p.kv_heads);
  const dim3 grid((R + WARPS * 16 - 1) / (WARPS * 16), p.kv_heads, p.splits);
  constexpr size_t smem = smem_bytes<D, KT, WARPS>();
  configure<D, WARPS, KT, MIN_BLOCKS>();
  launch_pdl(flash_attention_kernel<D, WARPS, KT, MIN_BLOCKS>, grid, dim3(WARPS * 32), smem, stream,
             p);
  DLLM_CUDA_LAUNCH_CHECK();
}

template <int D>
void launch(const AttentionParams& p, cudaStream_t stream) {
  switch (warps_for(p.n_q * (p.heads / p.kv_heads))) {
    case 1:
      launch_warps<D, 1, 32, 1>(p, stream);
      break;
    case 2:
      launch_warps<D, 2, 32, 1>(p, stream);
      break;
    default:
      // Three 4-warp blocks per SM (registers capped at 168, a few spilled): 41 % instead of 35 %
      // of copy bandwidth on 32-row blocks at 128K context (H100; 32-key tiles or four blocks
      // with 128 registers were slower).
      launch_warps<D, 4, 64, 3>(p, stream);
      break;
  }
}

// Blocks of the configuration launch<D> picks for `warps` that fit on one SM.
template <int D>
int resident_blocks(int warps) {
  return warps == 1   ? configure<D, 1, 32, 1>()
         : warps == 2 ? configure<D, 2, 32, 1>()
                      : configure<D, 4, 64, 3>();
}

// One block per row where the rows are few (at most two per SM) or the splits many, else a warp
// per row. Measured on the H100 (SDAR-8B shapes): 4 queries at 32K (128 rows x 99 splits) 64.2
// µs with a block per row, 75.7 with a warp per row (one-warp blocks); 32 queries at 4K (1024
// rows x 16 splits) 22.1 vs 21.1 µs.
void launch_combine(const AttentionParams& p, int rows, cudaStream_t stream) {
  if (p.splits > kWarpCombineMaxSplits || rows <= 2 * device_sm_count()) {
    launch_pdl(combine_kernel, dim3(static_cast<unsigned>(rows)), dim3(kCombineThreads),
               2 * combine_weight_slots(p.splits) * sizeof(float), stream, p);
    return;
  }
  const int warps = combine_warps(rows, device_sm_count());
  const dim3 grid((rows + warps - 1) / warps), block(warps * 32);
  const size_t smem = warps * kWarpCombineMaxSplits * sizeof(float);
  switch (p.head_dim) {
    case 16:
      launch_pdl(combine_warp_kernel<1>, grid, block, smem, stream, p);
      break;
    case 32:
      launch_pdl(combine_warp_kernel<2>, grid, block, smem, stream, p);
      break;
    case 64:
      launch_pdl(combine_warp_kernel<4>, grid, block, smem, stream, p);
      break;
    default:
      launch_pdl(combine_warp_kernel<8>, grid, block, smem, stream, p);
      break;
  }
}

}  // namespace

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}
}  // namespace

size_t attention_partial_ml_floats(size_t split_rows) {
  return (2 * split_rows + 3) / 4 * 4;
}

size_t attention_workspace_floats(int n_q, int heads, int head_dim, int splits) {
  // The split counters, then fp32 (m, l) and bf16 O per split and row.
  const size_t split_rows = static_cast<size_t>(splits) * n_q * heads;
  return kAttentionSplitCounters + attention_partial_ml_floats(split_rows) +
         split_rows * head_dim / 2;
}

bool attention_workspace_ensure(DeviceBuffer<float>& workspace, size_t floats,
                                cudaStream_t stream) {
  if (!workspace.ensure(floats, "attention workspace")) return false;
  DLLM_CUDA_CHECK(
      cudaMemsetAsync(workspace.get(), 0, kAttentionSplitCounters * sizeof(int32_t), stream));
  return true;
}

void attention_use_workspace(AttentionParams& p, float* workspace) {
  const size_t rows = static_cast<size_t>(p.splits) * p.n_q * p.heads;
  workspace += kAttentionSplitCounters;
  p.partial_ml = workspace;
  p.partial_o = reinterpret_cast<bf16*>(workspace + attention_partial_ml_floats(rows));
}

bool attention_use_sm90(int head_dim, int rows) {
#ifdef DLLM_HAVE_SM90A
  return sm90_attention_serves(head_dim, rows);
#else
  (void)head_dim;
  (void)rows;
  return false;
#endif
}

int attention_splits(int n_q, int heads, int kv_heads, int head_dim, int max_keys, int num_sms) {
  const int R = n_q * (heads / kv_heads);
  int rows_per_block = 0, resident = 1, tile_keys = 0;
#ifdef DLLM_HAVE_SM90A
  if (attention_use_sm90(head_dim, R)) {
    rows_per_block = sm90_attention_rows_per_block(R);
    resident = sm90_attention_resident_blocks(R);
    tile_keys = sm90_attention_tile_keys(R);
  }
#endif
  if (rows_per_block == 0) {
    const int warps = warps_for(R);
    rows_per_block = warps * 16;
    tile_keys = tile_keys_for(warps);
    switch (head_dim) {
      case 16:
        resident = resident_blocks<16>(warps);
        break;
      case 32:
        resident = resident_blocks<32>(warps);
        break;
      case 64:
        resident = resident_blocks<64>(warps);
        break;
      case 128:
        resident = resident_blocks<128>(warps);
        break;
      default:
        break;  // attention() reports the unsupported head_dim
    }
  }
  const int blocks = (R + rows_per_block - 1) / rows_per_block * kv_heads;
  // Splits long enough (>= 4 tiles) that the per-split prologue and partial-result traffic stay
  // small, and no more blocks than one wave of resident blocks holds (rounded down: a few blocks
  // left over for a second wave double the step's attention time; that rounding-up was what made
  // 128K context slower with this rule, 24.6 -> 28.4 ms, before it was fixed). Measured on the
  // H100 (SDAR-8B shape, 32-row step) against >= 2 tiles and eight blocks per SM: 4K context
  // 9.13 -> 8.24 ms, 32K 12.71 -> 11.10 ms.
  // DLLM_ATTN_MIN_TILES / DLLM_ATTN_WAVES override the two bounds (tuning experiments only).
  static const int min_tiles = env_int("DLLM_ATTN_MIN_TILES", 4);
  static const int waves = env_int("DLLM_ATTN_WAVES", 1);
  const int split_keys = min_tiles * tile_keys;
  const int by_keys = (max_keys + split_keys - 1) / split_keys;
  const int by_wave = waves * resident * num_sms / blocks;
  return std::max(1, std::min({by_keys, by_wave, kMaxSplits}));
}

void attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.n_q == 0) return;
  if (p.heads % p.kv_heads != 0)
    fail("attention: heads ", p.heads, " not a multiple of kv heads ", p.kv_heads);
  if (p.kind == MaskKind::kBlockCausal && p.block_size <= 0)
    fail("attention: block-causal needs a block size");
  const int rows = p.n_q * (p.heads / p.kv_heads);
  if (attention_use_sm90(p.head_dim, rows)) {
#ifdef DLLM_HAVE_SM90A
    if (sm90_attention(p, stream)) return;  // merged its splits itself
#endif
  } else {
    switch (p.head_dim) {
      case 16:
        launch<16>(p, stream);
        break;
      case 32:
        launch<32>(p, stream);
        break;
      case 64:
        launch<64>(p, stream);
        break;
      case 128:
        launch<128>(p, stream);
        break;
      default:
        fail("CUDA attention supports head_dim 16, 32, 64 and 128 (got ", p.head_dim, ")");
    }
  }
  if (p.splits > kMaxSplits)
    fail("attention: ", p.splits, " key splits (at most ", kMaxSplits, ")");
  if (p.head_dim > kCombineDims) fail("attention: head_dim ", p.head_dim, " > ", kCombineDims);
  if (p.splits == 1) return;  // the kernel wrote the output (write_split_partials())
  // The combine pass as a programmatic dependent launch on Hopper: it is scheduled while the
  // attention kernel's last blocks finish (they trigger after their main loop) and waits for
  // their partials on the device, instead of launching after the kernel has drained.
  launch_combine(p, rows * p.kv_heads, stream);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
