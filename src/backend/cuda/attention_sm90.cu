// Flash attention on Hopper's warpgroup MMA (wgmma, sm_90a), for head_dim 128 and 64 or more
// rows (queries x GQA group) per KV head — a denoising block of 16-32 queries at GQA 4 and up, or
// a prefill. Same parameters, rules (attention_mask.cuh) and split-KV partial results as the
// mma.sync kernel of attention.cu, whose combine pass merges them.
//
// Why a second kernel: a 32-query block at GQA 4 puts 128 query rows on every K/V byte, 128 FLOP
// per byte, so streaming the cache at 70 % of the H100's copy bandwidth needs ~270 TFLOP/s of
// attention math. mma.sync sustained ~160 here (each warp re-reads every K/V fragment from shared
// memory for its own 16 rows); wgmma reads a K/V tile once per 64 rows, straight from shared
// memory, and runs asynchronously.
//
// One block = NWG warpgroups x 64 rows, one KV head, one split of the keys. Q (per warpgroup) and
// STAGES K/V tiles of 64 keys sit in shared memory in the 128-byte-swizzle layout wgmma reads
// (wgmma_ptx.cuh), filled by cp.async (which also gathers through a slot list). Per tile:
// S = Q Kᵀ (8 wgmma m64n64k16, both operands in shared memory), scale + mask + online softmax on
// the S fragments in registers, then O += P V (4 wgmma m64n128k16, P from registers, V
// MN-major). The S and A-operand register fragments have the mma.sync m16n8 layout, so the mask
// and softmax code is the one of attention.cu.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>

#include "backend/cuda/attention_dispatch.h"
#include "backend/cuda/attention_mask.cuh"
#include "backend/cuda/attention_seq.cuh"
#include "backend/cuda/attention_serial_merge.cuh"
#include "backend/cuda/attention_sm90.h"
#include "backend/cuda/attention_sm90_merge.cuh"
#include "backend/cuda/attention_sm90_tile.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/flash_tile.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl_launch.h"
#include "backend/cuda/wgmma_ptx.cuh"

namespace dllm::cuda {

namespace {

using namespace ptx;

using sm90::half_bytes;
using sm90::kD;
using sm90::kQTile;
using sm90::swizzled;

// Shared memory: Q [NWG][64 rows], then per stage K and V tiles of KT keys (all 1024-byte
// aligned), then per stage the keys' logical positions.
template <int NWG, int KT, int STAGES>
struct SmemLayout {
  static constexpr uint32_t kv_tile = 2 * half_bytes(KT);
  static constexpr uint32_t q = 0;
  static constexpr uint32_t kv = NWG * kQTile;
  static constexpr uint32_t kpos = kv + STAGES * 2 * kv_tile;  // [STAGES][KT]
  static constexpr uint32_t end = kpos + STAGES * KT * 4;
  static constexpr size_t bytes = end + 1024;  // room to align the base to 1024
};

// One block's work: rows [row_block * 64 NWG, +64 NWG) of KV head kv_head_of(p) over split `split`
// of the keys. P: AttentionParams or AttentionSeqView (attention_seq.cuh). PREFIX (batched calls
// with a prefix_lse sequence): also the prefix-only (m, l) of the rows of the sequences that want
// them (flash_tile.cuh: prefix_stats_at_tile) and the raw prefix scores of their score_queries
// (write_prefix_scores); the other instances are as before.
// split == batch_layout::kSerialSplit (a serial batch item, never a prefix_lse sequence): every
// split of the sequence in turn, through one pipeline, each written as its own block would, then
// merged by this block (attention_serial_merge.cuh).
template <int NWG, int KT, int STAGES, bool MERGE, class P, bool PREFIX = false>
__device__ __forceinline__ void attention_sm90_block(const P& p, int row_block, int split,
                                                     const sm90::MergeArgs* merge_args) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(KT == 32 || KT == 64, "wgmma n32 or n64 score tiles");
  using L = SmemLayout<NWG, KT, STAGES>;
  constexpr int kKeys = KT;
  constexpr int kThreads = NWG * 128;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (1024u - (raw_addr & 1023u)) & 1023u;
  unsigned char* smem = smem_raw + pad;
  const uint32_t sbase = raw_addr + pad;
  int* kpos = reinterpret_cast<int*>(smem + L::kpos);

  const int group = p.heads / p.kv_heads;
  const int R = p.n_q * group;
  const int g = kv_head_of(p);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const int n_keys = seq_n_keys(p);
  const int n_cache = n_keys - p.n_q;
  // As in attention.cu: the keys present (read on the device) are shared out among the splits.
  const SplitSpan span = split_span(n_keys, p.splits, split, split_last_of(p, split), kKeys);
  // Several splits in turn: a serial item (the planner gives this kernel no split groups).
  const bool serial = span.last > span.first;
  // A split block skips the tiles no row of its block sees (a serial item keeps its splits whole).
  const int last_row = min(R, (row_block + 1) * 64 * NWG) - 1;
  const int k_begin = span.k_begin;
  const int k_end =
      serial ? span.k_end : min(span.k_end, visible_keys_end(p, last_row, group, n_cache, n_keys));
  const int n_tiles = k_begin < k_end ? (k_end - k_begin + kKeys - 1) / kKeys : 0;

  const int row0 = row_block * 64 * NWG;
  const int ra = row0 + warp * 16 + lane / 4, rb = ra + 8;  // rows of this lane's fragments
  const MaskRow row_a = mask_row(p, ra, R, group), row_b = mask_row(p, rb, R, group);
  const int64_t qrow_stride = static_cast<int64_t>(p.heads) * kD;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * kD;

  // K/V tiles by cp.async, each warp copying kKeysPerWarp whole key rows: its lanes resolve
  // their key's slot once a tile (a paged slot is a load of the page table) and every 16-byte copy
  // of a row takes it by a shuffle. Measured against a slot looked up per copy (Nsight Compute,
  // 128 sequences x 32 queries x 1K keys, SDAR-8B shape): the lookups' serial loads and the
  // view's pointers re-read from shared memory around every copy were ~19 % of the warps' time.
  constexpr int kKeysPerWarp = kKeys / (kThreads / 32);  // 8 or 4
  constexpr int kRowsPerPass = 32 / 16;                  // rows one warp-wide copy covers
  static_assert(kKeysPerWarp * (kThreads / 32) == kKeys && kKeysPerWarp <= 32);
  const int lane_chunk = lane & 15;
  const int64_t column = static_cast<int64_t>(g) * kD + lane_chunk * 8;
  auto load_tile = [&](int stage, int t0) {
    unsigned char* kd = smem + L::kv + stage * 2 * L::kv_tile;
    unsigned char* vd = kd + L::kv_tile;
    const int first = warp * kKeysPerWarp;  // this warp's keys of the tile
    const int own = t0 + first + lane % kKeysPerWarp;
    const bool own_ok = own < k_end;
    const int own_slot = own_ok ? key_slot(p, own) : 0;  // 0 past the keys: never read
    const bf16* k_base = p.k_cache + column;
    const bf16* v_base = p.v_cache + column;
#pragma unroll
    for (int r0 = 0; r0 < kKeysPerWarp; r0 += kRowsPerPass) {
      const int r = r0 + lane / 16, kr = first + r;
      const int64_t row = static_cast<int64_t>(__shfl_sync(0xffffffffu, own_slot, r)) * kv_row;
      const bool ok = t0 + kr < k_end;  // past the keys: zero-filled
      cp_async16(kd + swizzled<KT>(kr, lane_chunk), k_base + row, ok);
      cp_async16(vd + swizzled<KT>(kr, lane_chunk), v_base + row, ok);
    }
    // The keys' positions too (0 past the end): no thread waits on a global load here.
    if (lane < kKeysPerWarp)
      cp_async4(kpos + stage * kKeys + first + lane, p.slot_positions + own_slot, own_ok);
  };

  __shared__ ScoreRowsSmem<PREFIX ? NWG * 4 : 1> score_rows;  // flash_tile.cuh
  if constexpr (PREFIX) stage_score_rows(p, score_rows, row0 + warp * 16, R, group, warp, lane);
  if (n_tiles > 0) {  // Q rows of this block, in the first tile's group
    for (int c = tid; c < NWG * 64 * 16; c += kThreads) {
      const int r = c >> 4, kc = c & 15, rr = row0 + r;
      const bool ok = rr < R;
      const bf16* src =
          ok ? p.q + (rr / group) * qrow_stride + (g * group + rr % group) * kD + kc * 8 : p.q;
      cp_async16(smem + L::q + (r >> 6) * kQTile + swizzled<64>(r & 63, kc), src, ok);
    }
  }
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_tiles) load_tile(s, k_begin + s * kKeys);
    cp_async_commit();
  }

  float o[16][4];  // 16 n8 chunks of 128 dims x {row a, row b} (flash_tile.cuh's layout)
#pragma unroll
  for (int dn = 0; dn < 16; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  // The wgmma wrappers take the accumulators as one flat array (same registers, same order).
  float(&o_flat)[64] = reinterpret_cast<float(&)[64]>(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // m: base-2, scaled (below)
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const uint32_t q_addr = sbase + L::q + wg * kQTile;
  // A serial item's split being computed, and where its keys end.
  int split_now = span.first, split_end = serial ? span.split_end(span.first) : k_end;

  for (int it = 0; it < n_tiles; ++it) {
    const int t0 = k_begin + it * kKeys, stage = it % STAGES;
    cp_async_wait<STAGES - 2>();  // this thread's copies of tile `it` have landed ...
    wgmma::fence_proxy_async();   // ... are visible to wgmma ...
    __syncthreads();              // ... and so are everyone's; tile it - 1 is done with
    if (it + STAGES - 1 < n_tiles) load_tile((it + STAGES - 1) % STAGES, t0 + (STAGES - 1) * kKeys);
    cp_async_commit();

    const uint32_t k_addr = sbase + L::kv + stage * 2 * L::kv_tile, v_addr = k_addr + L::kv_tile;
    float s[KT / 8][4];  // KT / 8 n8 chunks of keys x {row a, row b}
    float(&s_flat)[KT / 2] = reinterpret_cast<float(&)[KT / 2]>(s);
    sm90::issue_scores<KT>(s_flat, q_addr, k_addr);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_registers(s_flat);
    sm90::mask_scores<KT>(p, s_flat, kpos + stage * kKeys, t0, k_end, n_cache, n_keys, row_a, row_b,
                          lane);

    if constexpr (PREFIX)
      hand_over_tile(
          s, m, l, p, score_rows, warp, [&] { return split; }, g, group, R, ra, t0, n_cache,
          scale_log2, lane);
    online_softmax_tile(s, o, m, l, scale_log2);

    // O += P V: P's fragments straight from S's; they must stay untouched until the wgmmas
    // reading them complete.
    uint32_t a[KT / 16][4];
    sm90::pack_probabilities<KT>(s, a);
    sm90::issue_values<KT>(o_flat, a, v_addr);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_registers(o_flat);
    sm90::keep_fragments<KT>(a);
    if (serial && t0 + kKeys >= split_end) {  // its split's last tile: write it, start afresh
      write_split_partials(p, split_now, g, R, ra, m, l, o, lane);
      reset_flash_state(m, l, o);
      ++split_now;
      split_end = min(n_keys, split_end + span.chunk);
    }
  }
  cp_async_wait<0>();
  trigger_dependent_launch();  // the next kernel (or the combine pass) may be scheduled now

  // The block's split (or a serial item's splits without keys: the empty state).
  for (; split_now <= span.last; ++split_now)
    write_split_partials(p, split_now, g, R, ra, m, l, o, lane);
  if constexpr (PREFIX)
    if (p.prefix_ml)
      prefix_stats_after_loop(m, l, k_begin, n_tiles, kKeys, n_cache, lane, p.prefix_ml, split,
                              p.kv_heads, g, R, ra);
  if constexpr (kIsBatchView<P>)
    if (serial) {
      merge_serial_splits<16>(p, g, R, ra, lane);
      return;  // nothing of the in-kernel merge: its counters are for split blocks
    }
  if constexpr (MERGE) sm90::merge_splits(merge_args, 64 * NWG, L::kv);
#endif
}

// One sequence: grid (row blocks, KV heads, splits); MERGE: the splits merge themselves.
template <int NWG, int KT, int STAGES, int MIN_BLOCKS, bool MERGE>
__global__ void __launch_bounds__(NWG * 128, MIN_BLOCKS) attention_sm90_kernel(AttentionParams p) {
  __shared__ sm90::MergeArgs merge_args;  // for merge_splits() (MERGE only)
  if (MERGE && threadIdx.x == 0)
    merge_args = {p.partial_ml,
                  p.partial_o,
                  p.out,
                  attention_split_counters(p),
                  p.splits,
                  p.heads,
                  p.kv_heads,
                  p.n_q * (p.heads / p.kv_heads),
                  static_cast<int>(blockIdx.x),
                  static_cast<int>(blockIdx.z),
                  static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x),
                  static_cast<int>(blockIdx.y)};
  // Launched as a programmatic dependent (pdl_launch.h): the kernel before it wrote Q and K/V.
  wait_for_primary_grid();
  attention_sm90_block<NWG, KT, STAGES, MERGE>(p, blockIdx.x, blockIdx.z, &merge_args);
}

// Key-list entries a batched block may keep in shared memory (4 KB: two blocks still fit an SM).
constexpr int kSm90KeyStage = 1024;

// A batch: grid attention_batch_grid() over the work-item capacity; items past the plan's count
// exit at once. The combine pass merges the splits, or (MERGE: the whole grid is one wave,
// sm90_attention_batch_merges()) the blocks do, as in the single-sequence kernel, with one
// counter pair per (sequence row block, KV head) — the plan numbers the row blocks.
template <int NWG, int KT, int STAGES, int MIN_BLOCKS, bool MERGE, bool PREFIX = false>
__global__ void __launch_bounds__(NWG * 128, MIN_BLOCKS)
    attention_sm90_batch_kernel(AttentionBatchKernelArgs a) {
  __shared__ AttentionSeqView view;
  __shared__ int32_t key_stage[kSm90KeyStage];
  __shared__ sm90::MergeArgs merge_args;  // MERGE only
  if (!load_seq_view<KT, kSm90KeyStage>(a, batch_layout::kSm90, view, key_stage)) return;
  if (MERGE && threadIdx.x == 0)
    merge_args = {view.partial_ml,
                  view.partial_o,
                  view.out,
                  a.counters,
                  view.splits,
                  a.heads,
                  a.kv_heads,
                  view.n_q * (a.heads / a.kv_heads),
                  view.row_block,
                  view.split,
                  view.merge_pair * a.kv_heads + view.kv_head,
                  view.kv_head};
  wait_for_primary_grid();
  attention_sm90_block<NWG, KT, STAGES, MERGE, AttentionSeqView, PREFIX>(view, view.row_block,
                                                                         view.split, &merge_args);
}

// Configurations: warpgroups per block (64 rows each), keys per tile, pipeline stages, blocks per
// SM the register budget is cut for. DLLM_ATTN_SM90_CONFIG picks one by index (tuning
// experiments only).
struct Config {
  int warpgroups, tile_keys, stages, min_blocks;
};
constexpr Config kConfigs[] = {
    {2, 64, 2, 2},  // 0
    {2, 32, 4, 2},  // 1
    {1, 64, 2, 2},  // 2
    {2, 32, 3, 2},  // 3
    {1, 32, 4, 2},  // 4
};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);

int config_for(int rows) {
  static const int forced = [] {
    const char* v = std::getenv("DLLM_ATTN_SM90_CONFIG");
    return v ? std::atoi(v) : -1;
  }();
  if (forced >= 0 && forced < kNumConfigs) return forced;
  return rows >= 128 ? 0 : 2;
}

template <int NWG, int KT, int STAGES, int MIN_BLOCKS>
int instance(const AttentionParams* p, bool merge, cudaStream_t stream) {
  constexpr size_t smem = SmemLayout<NWG, KT, STAGES>::bytes;
  auto* kernel = attention_sm90_kernel<NWG, KT, STAGES, MIN_BLOCKS, false>;
  auto* merging = attention_sm90_kernel<NWG, KT, STAGES, MIN_BLOCKS, true>;
  static PerDevice<int> resident_on;
  const int resident = resident_on.get([&] {
    for (auto* k : {kernel, merging})
      DLLM_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    int n = 0, n_merging = 0;
    DLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, NWG * 128, smem));
    DLLM_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n_merging, merging, NWG * 128, smem));
    return std::max(std::min(n, n_merging), 1);
  });
  if (p) {
    const int R = p->n_q * (p->heads / p->kv_heads);
    const dim3 grid((R + 64 * NWG - 1) / (64 * NWG), p->kv_heads, p->splits);
    launch_pdl(merge ? merging : kernel, grid, dim3(NWG * 128), smem, stream, *p);
    DLLM_CUDA_LAUNCH_CHECK();
  }
  return resident;
}

// Launches (p set) or sizes (p null) configuration c.
template <int C = 0>
int run(int c, const AttentionParams* p, bool merge, cudaStream_t stream) {
  if constexpr (C < kNumConfigs) {
    if (c != C) return run<C + 1>(c, p, merge, stream);
    constexpr Config k = kConfigs[C];
    return instance<k.warpgroups, k.tile_keys, k.stages, k.min_blocks>(p, merge, stream);
  } else {
    return 1;
  }
}

// Batched calls: configuration 0 (two warpgroups, 64-key tiles) for every sequence — and, where
// the whole grid fits one block per SM (a lone sequence or a few over short caches), the same
// tiles with four pipeline stages (same bits: the stages only change when a tile's loads are
// issued), so that a block alone on its SM has three tiles in flight instead of one.
constexpr Config kBatch = kConfigs[0];
constexpr Config kBatchDeep = {kBatch.warpgroups, kBatch.tile_keys, 4, 1};
static_assert(64 * kBatch.warpgroups == batch_layout::kSm90Rows &&
              kBatch.tile_keys == batch_layout::kSm90TileKeys);
template <const Config& C>
constexpr size_t kBatchSmem = SmemLayout<C.warpgroups, C.tile_keys, C.stages>::bytes;
template <const Config& C, bool MERGE, bool PREFIX = false>
auto* batch_kernel() {
  return attention_sm90_batch_kernel<C.warpgroups, C.tile_keys, C.stages, C.min_blocks, MERGE,
                                     PREFIX>;
}

// Blocks of the batched kernel of configuration C that fit on one SM (both MERGE variants, and
// for kBatch the PREFIX ones: a merging grid must be resident whichever runs).
template <const Config& C>
int batch_resident_blocks() {
  static PerDevice<int> resident_on;
  return resident_on.get([] {
    int n = INT_MAX;
    auto fit = [&](auto* k) {
      DLLM_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kBatchSmem<C>)));
      int blocks = 0;
      DLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, C.warpgroups * 128,
                                                                    kBatchSmem<C>));
      n = std::min(n, blocks);
    };
    fit(batch_kernel<C, false>());
    fit(batch_kernel<C, true>());
    if constexpr (&C == &kBatch) {
      fit(batch_kernel<C, false, true>());
      fit(batch_kernel<C, true, true>());
    }
    return std::max(n, 1);
  });
}

}  // namespace

int sm90_attention_batch_resident_blocks() {
  return batch_resident_blocks<kBatch>();
}

bool sm90_attention_batch_merges(const AttentionBatchCapacity& c, int kv_heads) {
  static const bool enabled = env_switch_on("DLLM_ATTN_MERGE");
  const int64_t wave =
      static_cast<int64_t>(sm90_attention_batch_resident_blocks()) * device_sm_count();
  const int64_t blocks = static_cast<int64_t>(c.sm90_items) * kv_heads;
  // As sm90_attention_merges(), on the capacity (so that a captured graph keeps its choice):
  // the whole grid one wave (a sequence's splits x KV heads are at most the grid, so wave /
  // kv_heads bounds its splits), at least 3/4 of one, and no mma.sync launch before it.
  // No warp-specialised items either: theirs may be split blocks, which the combine pass merges.
  return enabled && c.mma_items == 0 && c.sm90_ws_items == 0 && c.sm90_items > 0 &&
         blocks <= wave && 4 * blocks >= 3 * wave && wave / kv_heads <= sm90::kMaxMergedSplits &&
         2 * blocks <= batch_layout::kMergeCounters;
}

void sm90_attention_batch(AttentionBatchKernelArgs a, int items, bool merge, cudaStream_t stream) {
  if (items <= 0) return;
  static const bool deep_enabled = env_switch_on("DLLM_ATTN_BATCH_DEEP");
  const dim3 grid = attention_batch_grid(items, a);
  const int64_t blocks = int64_t{items} * a.kv_heads;
  // MAGE's selecting step (a hand-over): kBatch's tiles (the same bits as the deep ones)
  if (a.prefix_ml || a.prefix_scores) {
    batch_resident_blocks<kBatch>();
    launch_pdl(merge ? batch_kernel<kBatch, true, true>() : batch_kernel<kBatch, false, true>(),
               grid, dim3(kBatch.warpgroups * 128), kBatchSmem<kBatch>, stream, a);
  } else if (!merge && deep_enabled &&
             blocks <= int64_t{batch_resident_blocks<kBatchDeep>()} * device_sm_count()) {
    launch_pdl(batch_kernel<kBatchDeep, false>(), grid, dim3(kBatchDeep.warpgroups * 128),
               kBatchSmem<kBatchDeep>, stream, a);
  } else {
    batch_resident_blocks<kBatch>();  // sets the shared-memory limits once
    launch_pdl(merge ? batch_kernel<kBatch, true>() : batch_kernel<kBatch, false>(), grid,
               dim3(kBatch.warpgroups * 128), kBatchSmem<kBatch>, stream, a);
  }
  DLLM_CUDA_LAUNCH_CHECK();
}

bool sm90_attention_serves(int head_dim, int rows) {
  static const bool enabled = env_switch_on("DLLM_ATTN_SM90");
  return enabled && head_dim == kD && rows >= 64 &&
         device_compute_capability() == 90;  // sm_90a code runs on 9.0 only
}

int sm90_attention_rows_per_block(int rows) {
  return 64 * kConfigs[config_for(rows)].warpgroups;
}

int sm90_attention_tile_keys(int rows) {
  return kConfigs[config_for(rows)].tile_keys;
}

int sm90_attention_resident_blocks(int rows) {
  return run(config_for(rows), nullptr, false, nullptr);
}

bool sm90_attention_merges(const AttentionParams& p) {
  static const bool enabled = env_switch_on("DLLM_ATTN_MERGE");
  const int rows = p.n_q * (p.heads / p.kv_heads);
  const int c = config_for(rows);
  const int row_blocks = (rows + 64 * kConfigs[c].warpgroups - 1) / (64 * kConfigs[c].warpgroups);
  const int64_t blocks = static_cast<int64_t>(row_blocks) * p.kv_heads * p.splits;
  const int64_t wave = static_cast<int64_t>(run(c, nullptr, false, nullptr)) * device_sm_count();
  // Blocks wait for each other here, so the whole grid must be resident at once
  // (attention_splits() sizes one wave). Below ~3/4 of a wave (short contexts: 4K at SDAR-8B's
  // shape) the combine pass was faster on the H100: 20.5 vs 22.2 µs; from 16K up merging wins
  // (32K 65.5 -> 62.4 µs, 128K 194.2 -> 191.4 µs; docs/benchmarks.md).
  return enabled && p.splits <= sm90::kMaxMergedSplits &&
         2 * row_blocks * p.kv_heads <= kAttentionSplitCounters && blocks <= wave &&
         4 * blocks >= 3 * wave;
}

bool sm90_attention(const AttentionParams& p, cudaStream_t stream) {
  const int rows = p.n_q * (p.heads / p.kv_heads);
  if (!sm90_attention_serves(p.head_dim, rows))
    fail("sm90_attention: shape not served (head_dim ", p.head_dim, ", ", rows, " rows)");
  const bool merge = sm90_attention_merges(p);
  run(config_for(rows), &p, merge, stream);
  return merge;
}

}  // namespace dllm::cuda
