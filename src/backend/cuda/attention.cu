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

#include "backend/cuda/attention_mask.cuh"
#include "backend/cuda/attention_sm90.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/flash_tile.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl_launch.h"

namespace dllm::cuda {

namespace {

using namespace ptx;

template <int D, int KT, int WARPS>
constexpr size_t smem_bytes() {
  return 2 /*stages*/ * 2 /*K, V*/ * KT * (D + 8) * sizeof(bf16) + 2 * KT * sizeof(int) +
         2 * WARPS * sizeof(int);
}

// WARPS warps, 16 rows each; K/V tiles double-buffered with cp.async so the next tile's loads
// overlap this tile's math.
template <int D, int WARPS, int KT, int MIN_BLOCKS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
    flash_attention_kernel(AttentionParams p) {
  static_assert(KT <= WARPS * 32, "one key of a tile per thread");
  constexpr int kKeysPerTile = KT;
  constexpr int kStride = D + 8;  // padded shared-memory rows: conflict-free fragment loads
  constexpr int kTileElems = kKeysPerTile * kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);             // [2][tile]
  bf16* vs = ks + 2 * kTileElems;                           // [2][tile]
  int* kpos = reinterpret_cast<int*>(vs + 2 * kTileElems);  // [2][kKeysPerTile]
  int* kpos_max = kpos + 2 * kKeysPerTile;                  // [2][WARPS]: per warp's keys

  // Launched as a programmatic dependent (pdl_launch.h): the kernel before it wrote Q and K/V.
  wait_for_primary_grid();
  const int group = p.heads / p.kv_heads;
  const int R = p.n_q * group;
  const int g = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n_keys = *p.n_keys;
  const int n_cache = n_keys - p.n_q;  // keys [0, n_cache) are cache entries, the rest the queries
  // The keys there are (read on the device), not the grid's max_keys, are shared out: a graph
  // captured for a power-of-two bucket of keys keeps every split busy at any length within it.
  const int chunk =
      ((n_keys + p.splits - 1) / p.splits + kKeysPerTile - 1) / kKeysPerTile * kKeysPerTile;
  const int k_begin = split * chunk;
  const int k_end = min(n_keys, k_begin + chunk);

  const int ra = blockIdx.x * WARPS * 16 + warp * 16 + lane / 4;  // rows held by this lane
  const int rb = ra + 8;
  const MaskRow row_a = mask_row(p, ra, R, group), row_b = mask_row(p, rb, R, group);
  const int qa = row_a.q, qb = row_b.q;
  const int ha = g * group + ra % group, hb = g * group + rb % group;
  const bool va = row_a.valid, vb = row_b.valid;
  const int64_t qrow_stride = static_cast<int64_t>(p.heads) * D;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * D;

  auto load_tile = [&](int stage, int t0) {
    constexpr int kChunks = D / 8;  // 16-byte chunks per key row
    bf16* kd = ks + stage * kTileElems;
    bf16* vd = vs + stage * kTileElems;
    for (int c = threadIdx.x; c < kKeysPerTile * kChunks; c += WARPS * 32) {
      const int kr = c / kChunks, kc = c % kChunks, j = t0 + kr;
      const bool valid = j < k_end;
      const int64_t slot = valid ? (p.key_slots ? p.key_slots[j] : j) : 0;
      cp_async16(&kd[kr * kStride + kc * 8], p.k_cache + slot * kv_row + g * D + kc * 8, valid);
      cp_async16(&vd[kr * kStride + kc * 8], p.v_cache + slot * kv_row + g * D + kc * 8, valid);
    }
    // Key positions (block indices for block-causal) and, per warp, their maximum: a tile whose
    // keys all lie in blocks at or before a row's block needs no per-key mask for that row.
    const int kr = threadIdx.x;
    int key = INT_MIN;
    if (kr < kKeysPerTile) {
      key = key_mask_value(p, t0 + kr, k_end);
      kpos[stage * kKeysPerTile + kr] = key;
    }
    key = __reduce_max_sync(0xffffffffu, key);
    if ((threadIdx.x & 31) == 0) kpos_max[stage * WARPS + (threadIdx.x >> 5)] = key;
  };

  if (k_begin < k_end) load_tile(0, k_begin);
  cp_async_commit();

  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const bool b = reg & 1;
      const int col = kk * 16 + (lane % 4) * 2 + (reg >= 2 ? 8 : 0);
      const bool valid = b ? vb : va;
      qf[kk][reg] = valid ? *reinterpret_cast<const uint32_t*>(p.q + (b ? qb : qa) * qrow_stride +
                                                               (b ? hb : ha) * D + col)
                          : 0u;
    }

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // m: base-2, scaled
  const float scale_log2 = p.scale * 1.4426950408889634f;

  int stage = 0;
  for (int t0 = k_begin; t0 < k_end; t0 += kKeysPerTile, stage ^= 1) {
    const bool more = t0 + kKeysPerTile < k_end;
    if (more) load_tile(stage ^ 1, t0 + kKeysPerTile);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's group is complete; the next may still be in flight
    __syncthreads();
    const bf16* kt = ks + stage * kTileElems;
    const bf16* vt = vs + stage * kTileElems;
    const int* kp = kpos + stage * kKeysPerTile;
    // Whether every key of this tile is visible to both rows of this lane (rows past R compute
    // garbage that is never written, so they need no mask).
    int tile_max = INT_MIN;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) tile_max = max(tile_max, kpos_max[stage * WARPS + w]);
    const bool all_visible = tile_all_visible(p, t0, kKeysPerTile, k_end, n_cache, tile_max,
                                              min(row_a.qblk, row_b.qblk));

    float s[kKeysPerTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKeysPerTile / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      // Lane l addresses key row nt*8 + l%8; lanes 8-15, 16-23, 24-31 the next 8-dim columns.
      const bf16* krow = &kt[(nt * 8 + (lane & 7)) * kStride + (lane >> 3) * 8];
      if constexpr (D % 32 == 0) {
#pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
          uint32_t b[4];  // b0, b1 of dims kk*16.. and of (kk+1)*16..
          ldmatrix_x4(b, krow + kk * 16);
          mma_bf16(s[nt], qf[kk], b[0], b[1]);
          mma_bf16(s[nt], qf[kk + 1], b[2], b[3]);
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          uint32_t b[2];
          ldmatrix_x2(b, krow + kk * 16);  // lanes 0-15 give the addresses
          mma_bf16(s[nt], qf[kk], b[0], b[1]);
        }
      }
    }

    // Mask (scores stay unscaled: online_softmax_tile folds the scale into the exponent).
    if (!all_visible) {
#pragma unroll
      for (int nt = 0; nt < kKeysPerTile / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = nt * 8 + (lane % 4) * 2 + (e & 1);
          if (!key_visible(p, e >= 2 ? row_b : row_a, t0 + col, kp[col], k_end, n_cache, n_keys))
            s[nt][e] = -INFINITY;
        }
    }

    online_softmax_tile(s, o, m, l, scale_log2);

    // O += P V.
#pragma unroll
    for (int t = 0; t < kKeysPerTile / 16; ++t) {
      const uint32_t a[4] = {
          pack_bf16(s[2 * t][0], s[2 * t][1]), pack_bf16(s[2 * t][2], s[2 * t][3]),
          pack_bf16(s[2 * t + 1][0], s[2 * t + 1][1]), pack_bf16(s[2 * t + 1][2], s[2 * t + 1][3])};
      // Matrices: keys t*16+0..7 / +8..15 of dims dn*8.., then the same of (dn+1)*8..; lane l
      // addresses row l%8 of matrix l/8.
      const bf16* vrow = &vt[(t * 16 + (lane & 8) + (lane & 7)) * kStride + (lane >> 4) * 8];
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vrow + dn * 8);
        mma_bf16(o[dn], a, b[0], b[1]);
        mma_bf16(o[dn + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // this stage is refilled two tiles from now
  }
  cp_async_wait<0>();
  trigger_dependent_launch();

  write_split_partials(p, split, g, R, ra, m, l, o, lane);
}

// Merges the splits of each row: with w_s = l_s e^(m_s - M), out = sum_s w_s (O_s / l_s) /
// sum_s w_s (the partials hold O_s / l_s). One block per row: the split weights are computed
// once, in parallel, into shared memory, then each thread sums its dim over the splits with
// independent loads and no exp. Measured on the H100 at 33 splits (1024 rows, head_dim 128): a
// per-thread serial pass over (m_s, l_s) was latency-bound (~30 µs); this takes ~7 µs; one
// thread or one warp per row merging online took 17-22 µs, a block per row merging online in
// 4 ways 11 µs (Nsight Compute).
constexpr int kCombineThreads = 128;
constexpr int kMaxSplits = 4096;  // the combine's weights and maxima fit 32 KB of shared memory
// Weight slots: splits rounded up to 8, so that the unrolled sum below may read them with vector
// loads without going past the allocation (compute-sanitizer flagged exactly that).
__host__ __device__ constexpr int combine_weight_slots(int splits) {
  return (splits + 7) / 8 * 8;
}

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, u) : v + u;
  }
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = scratch[0];
#pragma unroll
  for (int w = 1; w < kCombineThreads / 32; ++w) v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
  __syncthreads();  // scratch is reused
  return v;
}

// Partials of the first splits each thread loads before the weights are known, so that their
// latency overlaps the (m, l) reductions.
constexpr int kCombinePrefetch = 16;

__global__ void __launch_bounds__(kCombineThreads) combine_kernel(AttentionParams p) {
  extern __shared__ float weight[];  // [2][combine_weight_slots(splits)]: m_s, then w_s (0 past)
  __shared__ float scratch[kCombineThreads / 32];
  const int slots = combine_weight_slots(p.splits);
  float* split_m = weight + slots;
  const int group = p.heads / p.kv_heads;
  const int R = p.n_q * group;
  const int row = blockIdx.x;  // over kv_heads * R: g R + r
  const int D = p.head_dim;
  const int64_t split_rows = static_cast<int64_t>(p.kv_heads) * R;
  const float* ml = p.partial_ml + static_cast<int64_t>(row) * 2;
  const bf16* po = p.partial_o + static_cast<int64_t>(row) * D;
  // Launched as a programmatic dependent of the attention kernel. (No early trigger of its own:
  // in a step the next kernel is a cuBLAS GEMM, and back-to-back attention calls scheduled early
  // only spread a short-context grid unevenly, 22 -> 25.5 µs at 4K.)
  wait_for_primary_grid();
  const int d = threadIdx.x;  // head_dim <= kCombineThreads (attention() checks)
  float pre[kCombinePrefetch];
#pragma unroll
  for (int s = 0; s < kCombinePrefetch; ++s)
    pre[s] = s < p.splits && d < D ? __bfloat162float(po[s * split_rows * D + d]) : 0.0f;
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < slots; s += kCombineThreads) {
    const float ms = s < p.splits ? ml[s * split_rows * 2] : -INFINITY;
    split_m[s] = ms;
    weight[s] = s < p.splits ? ml[s * split_rows * 2 + 1] : 0.0f;  // l_s for now
    mx = fmaxf(mx, ms);
  }
  mx = block_reduce(mx, true, scratch);  // its barrier also publishes split_m[] and l_s
  float denom = 0.0f;
  for (int s = threadIdx.x; s < slots; s += kCombineThreads) {
    const float ms = split_m[s];
    const float w = ms == -INFINITY ? 0.0f : __expf(ms - mx) * weight[s];
    weight[s] = w;
    denom += w;
  }
  denom = block_reduce(denom, false, scratch);  // ... and weight[]
  if (d >= D) return;
  float acc = 0.0f;
#pragma unroll
  for (int s = 0; s < kCombinePrefetch; ++s)
    if (s < p.splits) acc += pre[s] * weight[s];
#pragma unroll 8
  for (int s = kCombinePrefetch; s < p.splits; ++s)
    acc += __bfloat162float(po[s * split_rows * D + d]) * weight[s];
  const int g = row / R, r = row % R;
  const int qi = r / group, h = g * group + r % group;
  const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;  // a row that sees nothing: zeros
  p.out[(static_cast<int64_t>(qi) * p.heads + h) * D + d] = __float2bfloat16(acc * inv);
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
  static const int resident = [] {
    constexpr int smem = static_cast<int>(smem_bytes<D, KT, WARPS>());
    auto* kernel = flash_attention_kernel<D, WARPS, KT, MIN_BLOCKS>;
    DLLM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int n = 0;
    DLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, WARPS * 32, smem));
    return std::max(n, 1);
  }();
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

}  // namespace

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

// fp32 (m, l) per split and row, rounded up to 16 bytes: the bf16 O after them is read with
// 16-byte loads (attention_sm90.cu's merge).
size_t partial_ml_floats(size_t split_rows) {
  return (2 * split_rows + 3) / 4 * 4;
}
}  // namespace

size_t attention_workspace_floats(int n_q, int heads, int head_dim, int splits) {
  // The split counters, then fp32 (m, l) and bf16 O per split and row.
  const size_t split_rows = static_cast<size_t>(splits) * n_q * heads;
  return kAttentionSplitCounters + partial_ml_floats(split_rows) + split_rows * head_dim / 2;
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
  p.partial_o = reinterpret_cast<bf16*>(workspace + partial_ml_floats(rows));
}

namespace {
// The Hopper kernel (attention_sm90.cu) where it serves the shape, else the kernel above.
bool use_sm90(int head_dim, int rows) {
#ifdef DLLM_HAVE_SM90A
  return sm90_attention_serves(head_dim, rows);
#else
  (void)head_dim;
  (void)rows;
  return false;
#endif
}
}  // namespace

int attention_splits(int n_q, int heads, int kv_heads, int head_dim, int max_keys, int num_sms) {
  const int R = n_q * (heads / kv_heads);
  int rows_per_block = 0, resident = 1, tile_keys = 0;
#ifdef DLLM_HAVE_SM90A
  if (use_sm90(head_dim, R)) {
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
  if (use_sm90(p.head_dim, rows)) {
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
  if (p.head_dim > kCombineThreads)
    fail("attention: head_dim ", p.head_dim, " > ", kCombineThreads);
  // The combine pass as a programmatic dependent launch on Hopper: it is scheduled while the
  // attention kernel's last blocks finish (they trigger after their main loop) and waits for
  // their partials on the device, instead of launching after the kernel has drained.
  launch_pdl(combine_kernel, dim3(static_cast<unsigned>(rows * p.kv_heads)), dim3(kCombineThreads),
             2 * combine_weight_slots(p.splits) * sizeof(float), stream, p);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
