// Warp-specialised flash attention for long key ranges on Hopper (sm_90a) — long prompts, and the
// split blocks of denoising steps over long caches — FlashAttention-3 style:
// one producer warpgroup streams K/V tiles through the paged pool into a ring of shared-memory
// stages, two consumer warpgroups (64 query rows each) run the wgmma, and full / empty mbarriers
// hand the stages over — no block-wide barrier per tile. Each consumer overlaps a tile's softmax
// with the previous tile's P V: it issues S = Q Kᵀ of tile j and P V of tile j - 1 back to back,
// waits for S alone, and rescales O only once P V has landed. Split blocks (splits of >=
// DLLM_ATTN_WS_MIN_SPLIT_KEYS keys, attention_batch_plan.cpp) write partials for the combine pass;
// at 128K keys a decoding step's attention runs 9 % faster here than in the split kernel.
//
// Why: the split kernel (attention_sm90.cu) stops both warpgroups of a block at a barrier every
// tile and runs its softmax, then its P V, one after the other; over a 32K prompt (SDAR-8B
// heads) Nsight Compute put its tensor pipe at 38 % and the warps' stalls at that barrier and
// the wgmma waits (docs/benchmarks.md, issue 24).
//
// Same bits as the split kernel: the same 64-key tiles, 128 rows a block, and per tile the same
// steps (attention_sm90_tile.cuh) in the same order on every row — the overlap moves when O's
// rescale happens, never what it multiplies. The planner picks it by a sequence's own shape
// (batch_layout::kSm90Ws), and a sequence's result does not depend on which kernel ran.
//
// Tried and measured (H200, 32K causal, SDAR-8B heads; docs/benchmarks.md): the two consumers
// taking turns to issue (FlashAttention-3's ping-pong) — no gain; Q's fragments in registers
// (wgmma RS: the same bits) — 12 % slower; 128-key tiles (two stages fit) — 10 % slower; 128-key
// tiles with S by one n128 wgmma, K and V rings of their own (3 / 2 stages), stages handed over by
// cp.async mbarrier arrivals and setmaxnreg 64 / 216 — the same bits, 17 % slower (64K causal
// 91.9 ms against 75.8, 2026-11-30).
#include <algorithm>

#include "backend/cuda/attention_dispatch.h"
#include "backend/cuda/attention_mask.cuh"
#include "backend/cuda/attention_seq.cuh"
#include "backend/cuda/attention_sm90.h"
#include "backend/cuda/attention_sm90_tile.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/flash_tile.cuh"
#include "backend/cuda/mbarrier_ptx.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl_launch.h"
#include "backend/cuda/per_device.h"
#include "backend/cuda/wgmma_ptx.cuh"

namespace dllm::cuda {

namespace {

using namespace ptx;
using sm90::half_bytes;
using sm90::kD;
using sm90::kQTile;
using sm90::swizzled;

constexpr int kConsumers = 2;                     // warpgroups of 64 rows
constexpr int kThreads = (kConsumers + 1) * 128;  // + the producer warpgroup
constexpr int kKeyStage = 1024;  // key-list entries load_seq_view() stages in shared memory
static_assert(64 * kConsumers == batch_layout::kSm90Rows);
constexpr int kTileKeys = batch_layout::kSm90TileKeys;  // the split kernel's tiles: the same bits

// The ring of K/V tiles: stages, and tiles whose copies the producer keeps in flight before
// handing the oldest over (the consumers release tile j - 1 only once they hold tile j, so the
// ring needs lag <= stages - 2).
struct Pipe {
  static constexpr int kStages = 5;
  static constexpr int kLag = 2;
  static_assert(kLag <= kStages - 2);
  // Dynamic shared memory from a 1024-byte-aligned base: Q [kConsumers][64 rows], the stages' K
  // and V tiles, the stages' key positions, then the stages' full and empty barriers.
  static constexpr uint32_t kv_tile = 2 * half_bytes(kTileKeys);
  static constexpr uint32_t q = 0;
  static constexpr uint32_t kv = kConsumers * kQTile;
  static constexpr uint32_t kpos = kv + kStages * 2 * kv_tile;      // [kStages][kTileKeys]
  static constexpr uint32_t full = kpos + kStages * kTileKeys * 4;  // [kStages] mbarriers
  static constexpr uint32_t empty = full + kStages * 8;
  static constexpr uint32_t end = empty + kStages * 8;
  static constexpr size_t bytes = end + 1024;  // room to align the base to 1024
  static_assert(full % 8 == 0);

  unsigned char* smem;  // the aligned base
  uint32_t sbase;       // its shared-memory address
  static __device__ int stage(int tile) { return tile % kStages; }
  // The k-th use of a stage waits for phase parity k & 1.
  static __device__ uint32_t use_parity(int tile) { return (tile / kStages) & 1; }
  __device__ unsigned char* k_tile(int tile) const { return smem + kv + stage(tile) * 2 * kv_tile; }
  __device__ uint32_t k_addr(int tile) const { return sbase + kv + stage(tile) * 2 * kv_tile; }
  __device__ uint32_t v_addr(int tile) const { return k_addr(tile) + kv_tile; }
  __device__ int* positions(int tile) const {
    return reinterpret_cast<int*>(smem + kpos) + stage(tile) * kTileKeys;
  }
  __device__ uint32_t full_bar(int tile) const { return sbase + full + 8 * stage(tile); }
  __device__ uint32_t empty_bar(int tile) const { return sbase + empty + 8 * stage(tile); }
};

// The producer warpgroup: the n_tiles tiles of keys [k_begin, k_end) into the ring, by cp.async.
// Warp w copies keys kTileKeys/4 w .. of a tile, two whole key rows a warp-wide copy; lane l
// resolves the slot of its key l % (kTileKeys / 4) one tile ahead (a global load, behind the copies
// in flight) and shuffles it to the copies. A tile is handed over (full barrier) kLag tiles later,
// once this thread's copies of it have landed and are fenced for wgmma's async proxy.
__device__ __forceinline__ void produce(const AttentionSeqView& p, const Pipe& ring, int k_begin,
                                        int n_tiles, int k_end) {
  using R = Pipe;
  constexpr int kKeysPerWarp = kTileKeys / 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, lane_chunk = lane & 15;
  const int first = warp * kKeysPerWarp;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * kD;
  const int64_t column = static_cast<int64_t>(p.kv_head) * kD + lane_chunk * 8;
  const bf16* k_base = p.k_cache + column;
  const bf16* v_base = p.v_cache + column;
  auto slot_of = [&](int t0) {
    const int own = t0 + first + lane % kKeysPerWarp;
    return own < k_end ? key_slot(p, own) : 0;  // 0 past the keys: never read
  };
  int own_slot = slot_of(k_begin);
  for (int it = 0; it < n_tiles; ++it) {
    const int t0 = k_begin + it * kTileKeys;
    if (it >= R::kStages) mbarrier::wait(ring.empty_bar(it), R::use_parity(it) ^ 1);
    unsigned char* kd = ring.k_tile(it);
    unsigned char* vd = kd + R::kv_tile;
#pragma unroll
    for (int r0 = 0; r0 < kKeysPerWarp; r0 += 2) {
      const int r = r0 + lane / 16, kr = first + r;
      const int64_t row = static_cast<int64_t>(__shfl_sync(0xffffffffu, own_slot, r)) * kv_row;
      const bool ok = t0 + kr < k_end;  // past the keys: zero-filled
      cp_async16(kd + swizzled<kTileKeys>(kr, lane_chunk), k_base + row, ok);
      cp_async16(vd + swizzled<kTileKeys>(kr, lane_chunk), v_base + row, ok);
    }
    if (lane < kKeysPerWarp)
      cp_async4(ring.positions(it) + first + lane, p.slot_positions + own_slot,
                t0 + first + lane < k_end);
    cp_async_commit();
    if (it + 1 < n_tiles) own_slot = slot_of(t0 + kTileKeys);
    if (it >= R::kLag) {
      cp_async_wait<R::kLag>();
      wgmma::fence_proxy_async();
      mbarrier::arrive(ring.full_bar(it - R::kLag));
    }
  }
  cp_async_wait<0>();
  wgmma::fence_proxy_async();
  for (int it = max(0, n_tiles - R::kLag); it < n_tiles; ++it) mbarrier::arrive(ring.full_bar(it));
}

// A consumer warpgroup: its 64 rows over the split's tiles, then their partial result
// (write_split_partials(); one split: the output itself). It issues S of tile j and P V of tile j -
// 1 back to back, waits for S alone, runs the softmax while P V runs, and rescales O once P V has
// landed — the same multiplications in the same order as one tile after the other. PREFIX: MAGE's
// hand-over (flash_tile.cuh) as the split kernel does it; with STATS the prefix-only (m, l) too,
// without them the raw scores alone.
template <bool PREFIX, bool STATS, bool BY_INDEX>
__device__ __forceinline__ void consume(const AttentionSeqView& p, const Pipe& ring, int k_begin,
                                        int n_tiles, int k_end) {
  const int ct = threadIdx.x - 128;  // 0 .. 128 kConsumers - 1
  const int wg = ct >> 7, warp = ct >> 5, lane = ct & 31;
  const int group = p.heads / p.kv_heads;
  const int R = p.n_q * group, g = p.kv_head;
  const int n_keys = p.n_keys, n_cache = n_keys - p.n_q;
  const int row0 = p.row_block * 64 * kConsumers;
  const int ra = row0 + warp * 16 + lane / 4, rb = ra + 8;  // rows of this lane's fragments
  const MaskRow row_a = mask_row(p, ra, R, group), row_b = mask_row(p, rb, R, group);

  // The warpgroup's Q rows (past R: zeros), then a barrier of its own 128 threads.
  const int64_t qrow_stride = static_cast<int64_t>(p.heads) * kD;
  for (int c = ct & 127; c < 64 * 16; c += 128) {
    const int r = c >> 4, kc = c & 15, rr = row0 + wg * 64 + r;
    const bool ok = rr < R;
    const bf16* src =
        ok ? p.q + (rr / group) * qrow_stride + (g * group + rr % group) * kD + kc * 8 : p.q;
    cp_async16(ring.smem + Pipe::q + wg * kQTile + swizzled<64>(r, kc), src, ok);
  }
  cp_async_commit();
  cp_async_wait<0>();
  wgmma::fence_proxy_async();
  named_barrier::sync(1 + wg, 128);
  const uint32_t q_addr = ring.sbase + Pipe::q + wg * kQTile;

  float o[16][4];  // 16 n8 chunks of 128 dims x {row a, row b} (flash_tile.cuh's layout)
#pragma unroll
  for (int dn = 0; dn < 16; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float(&o_flat)[64] = reinterpret_cast<float(&)[64]>(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
  const float scale_log2 = p.scale * 1.4426950408889634f;
  float s[kTileKeys / 8][4];
  float(&s_flat)[kTileKeys / 2] = reinterpret_cast<float(&)[kTileKeys / 2]>(s);
  uint32_t a[kTileKeys / 16][4];  // P of the tile whose P V is next
  // MAGE's hand-over (PREFIX: flash_tile.cuh), as the split kernel does it.
  __shared__ ScoreRowsSmem<PREFIX ? 4 * kConsumers : 1> score_rows;
  if constexpr (PREFIX) stage_score_rows(p, score_rows, row0 + warp * 16, R, group, warp, lane);
  auto release = [&](int tile) {
    __syncwarp();
    if (lane == 0) mbarrier::arrive(ring.empty_bar(tile));
  };
  // The softmax of tile `it`, whose S has landed: masked, exponentiated, (m, l) updated.
  auto softmax = [&](int it) {
    const int t0 = k_begin + it * kTileKeys;
    wgmma::fence_registers(s_flat);
    sm90::mask_scores<kTileKeys, BY_INDEX>(p, s_flat, ring.positions(it), t0, k_end, n_cache,
                                           n_keys, row_a, row_b, lane);
    if constexpr (PREFIX && STATS)
      hand_over_tile(
          s, m, l, p, score_rows, warp, [&] { return p.split; }, g, group, R, ra, t0, n_cache,
          scale_log2, lane);
    else if constexpr (PREFIX)
      if (t0 < n_cache && warp_writes_scores(score_rows, warp))
        write_prefix_scores(s, p, score_rows, warp, g, group, t0, n_cache, lane);
    softmax_tile_scores(s, m, l, scale_log2, alpha);
  };

  if (n_tiles > 0) {
    mbarrier::wait(ring.full_bar(0), Pipe::use_parity(0));
    sm90::issue_scores<kTileKeys>(s_flat, q_addr, ring.k_addr(0));
    wgmma::commit();
    wgmma::wait<0>();
    softmax(0);
    rescale_output_unless_settled(o, alpha);
    sm90::pack_probabilities<kTileKeys>(s, a);
  }
  for (int it = 1; it < n_tiles; ++it) {
    mbarrier::wait(ring.full_bar(it), Pipe::use_parity(it));
    sm90::issue_scores<kTileKeys>(s_flat, q_addr, ring.k_addr(it));
    wgmma::commit();
    sm90::issue_values<kTileKeys>(o_flat, a, ring.v_addr(it - 1));
    wgmma::commit();
    wgmma::wait<1>();  // S of this tile (P V of the last may still run)
    softmax(it);
    wgmma::wait<0>();
    wgmma::fence_registers(o_flat);
    sm90::keep_fragments<kTileKeys>(a);
    release(it - 1);
    rescale_output_unless_settled(o, alpha);
    sm90::pack_probabilities<kTileKeys>(s, a);
  }
  if (n_tiles > 0) {
    sm90::issue_values<kTileKeys>(o_flat, a, ring.v_addr(n_tiles - 1));
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_registers(o_flat);
    sm90::keep_fragments<kTileKeys>(a);
  }
  trigger_dependent_launch();
  write_split_partials(p, p.split, g, R, ra, m, l, o, lane);
  if constexpr (PREFIX && STATS)
    if (p.prefix_ml)
      prefix_stats_after_loop(m, l, k_begin, n_tiles, kTileKeys, n_cache, lane, p.prefix_ml,
                              p.split, p.kv_heads, g, R, ra);
}

// Grid attention_batch_grid() over the kSm90Ws list's capacity; padding items exit at once.
// PREFIX: the launch holds a sequence that wants MAGE's hand-over (AttentionBatchKernelArgs::
// prefix_scores or prefix_ml); its other sequences skip it. STATS: some sequence wants the
// prefix-only (m, l) (prefix_ml) — an instance of its own, as that code in the tile loop cost a
// decoding launch ~12 % though it runs at one tile a split (Nsight Compute, 2026-12-01), and
// MAGE's few selection rows take theirs from their raw scores (mage_prefix_ml_from_scores).
// BY_INDEX: it holds a block-causal sequence, whose cold prefill is masked by index
// (sm90::mask_scores); every other sequence as in the plain instance. An instance of its own: with
// the by-index mask in the instance causal prompts run, their prefill came out 4 % slower
// (different code for the same work) while block-causal ones gained 3-4 % (docs/benchmarks.md,
// 2026-12-01).
template <bool PREFIX, bool STATS, bool BY_INDEX>
__global__ void __launch_bounds__(kThreads, 1)
    attention_ws_sm90_kernel(AttentionBatchKernelArgs a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ AttentionSeqView view;
  __shared__ int32_t key_stage[kKeyStage];
  if (!load_seq_view<kTileKeys, kKeyStage>(a, batch_layout::kSm90Ws, view, key_stage)) return;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (1024u - (raw_addr & 1023u)) & 1023u;
  const Pipe ring{smem_raw + pad, raw_addr + pad};
  if (threadIdx.x == 0)
    for (int it = 0; it < Pipe::kStages; ++it) {
      mbarrier::init(ring.full_bar(it), 128);              // every producer thread
      mbarrier::init(ring.empty_bar(it), 4 * kConsumers);  // every consumer warp
    }
  __syncthreads();
  wait_for_primary_grid();  // launched as a programmatic dependent: Q and K/V are written now

  const AttentionSeqView& p = view;
  const int group = p.heads / p.kv_heads;
  const int R = p.n_q * group, n_keys = p.n_keys;
  // The item's split of the keys, in the split kernel's tiles; the block's rows see no key past
  // k_end.
  const SplitSpan span = split_span(n_keys, p.splits, p.split, p.split, kTileKeys);
  const int last_row = min(R, (p.row_block + 1) * 64 * kConsumers) - 1;
  const int k_begin = span.k_begin;
  const int k_end = min(span.k_end, visible_keys_end(p, last_row, group, n_keys - p.n_q, n_keys));
  const int n_tiles = k_begin < k_end ? (k_end - k_begin + kTileKeys - 1) / kTileKeys : 0;
  if (threadIdx.x < 128)
    produce(p, ring, k_begin, n_tiles, k_end);
  else
    consume<PREFIX, STATS, BY_INDEX>(p, ring, k_begin, n_tiles, k_end);
#endif
}

}  // namespace

bool sm90_ws_attention_enabled() {
  static const bool enabled = env_switch_on("DLLM_ATTN_SM90_WS");
  return enabled && device_compute_capability() == 90;
}

void sm90_ws_attention_batch(AttentionBatchKernelArgs a, int items, cudaStream_t stream) {
  if (items <= 0) return;
  static PerDevice<bool> configured;
  configured.get([] {
    for (auto* kernel :
         {attention_ws_sm90_kernel<false, false, false>,
          attention_ws_sm90_kernel<true, true, false>, attention_ws_sm90_kernel<true, false, false>,
          attention_ws_sm90_kernel<false, false, true>})
      DLLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(Pipe::bytes)));
    return true;
  });
  const dim3 grid = attention_batch_grid(items, a);
  auto* kernel = a.prefix_ml         ? attention_ws_sm90_kernel<true, true, false>
                 : a.prefix_scores   ? attention_ws_sm90_kernel<true, false, false>
                 : a.ws_block_causal ? attention_ws_sm90_kernel<false, false, true>
                                     : attention_ws_sm90_kernel<false, false, false>;
  launch_pdl(kernel, grid, dim3(kThreads), Pipe::bytes, stream, a);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
