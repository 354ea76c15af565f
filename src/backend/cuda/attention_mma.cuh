// The mma.sync flash-attention kernel (bf16 tensor cores, m16n8k16, sm_80+; attention.cu says
// what it does and how it is launched): one body, templated over its parameter source
// (attention_seq.cuh), behind two kernels — one sequence (AttentionParams, the grid's x / z are
// the row block and split) and a batch (blockIdx.x indexes the plan's work list of this kind).
#pragma once

#include <climits>
#include <cmath>

#include "backend/cuda/attention_mask.cuh"
#include "backend/cuda/attention_seq.cuh"
#include "backend/cuda/attention_serial_merge.cuh"
#include "backend/cuda/flash_tile.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/mma_tile.cuh"

namespace dllm::cuda {

// K and V tiles and the keys' positions, per stage.
template <int D, int KT, int WARPS, int STAGES = 2>
constexpr size_t smem_bytes() {
  return STAGES * (2 /*K, V*/ * KT * (D + 8) * sizeof(bf16) + KT * sizeof(int));
}

// WARPS warps, 16 rows each; K/V tiles in STAGES buffers filled by cp.async, STAGES - 1 tiles
// ahead, so that the next tiles' loads overlap this tile's math
// (and, with more stages, each other: a block alone on its SM waits for a tile's round trip only
// once per STAGES - 1 tiles). PREFIX (batched calls with a prefix_lse sequence): also the
// prefix-only (m, l) of the rows of sequences that want them (flash_tile.cuh:
// prefix_stats_at_tile) and the raw prefix scores of their score_queries (write_prefix_scores);
// other instances are as before. split == batch_layout::kSerialSplit (a
// serial batch item, never a prefix_lse sequence): every split of the sequence in turn, through one
// pipeline, each written as its own block would, then merged here (attention_serial_merge.cuh). A
// split group (batch items): its splits the same way, merged by the combine pass.
template <int D, int WARPS, int KT, int STAGES, class P, bool PREFIX = false>
__device__ __forceinline__ void flash_attention_block(const P& p, int row_block, int split) {
  using namespace ptx;
  static_assert(KT <= WARPS * 32, "one key of a tile per thread");
  constexpr int kKeysPerTile = KT;
  constexpr int kStride = D + 8;  // padded shared-memory rows: conflict-free fragment loads
  constexpr int kTileElems = kKeysPerTile * kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);                  // [STAGES][tile]
  bf16* vs = ks + STAGES * kTileElems;                           // [STAGES][tile]
  int* kpos = reinterpret_cast<int*>(vs + STAGES * kTileElems);  // [STAGES][kKeysPerTile]

  const int group = p.heads / p.kv_heads;
  const int R = p.n_q * group;
  const int g = kv_head_of(p);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n_keys = seq_n_keys(p);
  const int n_cache = n_keys - p.n_q;  // keys [0, n_cache) are cache entries, the rest the queries
  // The keys there are (read on the device), not the grid's max_keys, are shared out: a graph
  // captured for a power-of-two bucket of keys keeps every split busy at any length within it.
  const SplitSpan span = split_span(n_keys, p.splits, split, split_last_of(p, split), kKeysPerTile);
  // Several splits in turn: a serial item (which merges them) or a split group (which leaves
  // them to the combine pass). Single-sequence calls: never.
  const bool serial = span.last > span.first;
  // A split block skips the tiles no row of its block sees (several splits are kept whole).
  const int last_row = min(R, (row_block + 1) * WARPS * 16) - 1;
  const int k_begin = span.k_begin;
  const int k_end =
      serial ? span.k_end : min(span.k_end, visible_keys_end(p, last_row, group, n_cache, n_keys));

  const int ra = row_block * WARPS * 16 + warp * 16 + lane / 4;  // rows held by this lane
  const int rb = ra + 8;
  const MaskRow row_a = mask_row(p, ra, R, group), row_b = mask_row(p, rb, R, group);
  const int qa = row_a.q, qb = row_b.q;
  const int ha = g * group + ra % group, hb = g * group + rb % group;
  const bool va = row_a.valid, vb = row_b.valid;
  const int64_t qrow_stride = static_cast<int64_t>(p.heads) * D;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * D;

  // K/V tiles by cp.async. One warp with a key per lane (the batched kernel's shape, and decode
  // calls'): the lane resolves its key's slot once a tile and each copy of the row takes it from
  // that lane by a shuffle, with the lane's 16-byte column of the rows held in locals. Measured
  // against what it replaced (Nsight Compute, 128 sequences x 4 queries x 4K keys): a slot
  // looked up per 16-byte chunk, and Hopper bulk copies — whose uniform operands make the warp
  // issue them row by row, one lane at a time (40 % of the warps' time) — 935 -> 659 µs a layer
  // with the Q pointers below. Other shapes take the chunk loop.
  constexpr bool kLaneOwnedRows = WARPS == 1 && kKeysPerTile == 32;
  constexpr int kChunks = D / 8;  // 16-byte chunks per key row
  const int lane_chunk = lane % kChunks;
  const bf16* k_column = p.k_cache + g * D + lane_chunk * 8;
  const bf16* v_column = p.v_cache + g * D + lane_chunk * 8;
  const int32_t* slot_positions = p.slot_positions;
  auto load_rows_lane_owned = [&](int stage, int t0) {
    constexpr int kRowsPerPass = 32 / kChunks;  // rows one warp-wide copy covers
    bf16* kd = ks + stage * kTileElems + lane_chunk * 8;
    bf16* vd = vs + stage * kTileElems + lane_chunk * 8;
    const bool ok = t0 + lane < k_end;
    const int slot = ok ? key_slot(p, t0 + lane) : 0;  // 0 past the keys: never read
#pragma unroll
    for (int r0 = 0; r0 < kKeysPerTile; r0 += kRowsPerPass) {
      const int kr = r0 + lane / kChunks;
      const int64_t row = static_cast<int64_t>(__shfl_sync(0xffffffffu, slot, kr)) * kv_row;
      const bool valid = t0 + kr < k_end;  // past the keys: zero-filled
      cp_async16(&kd[kr * kStride], k_column + row, valid);
      cp_async16(&vd[kr * kStride], v_column + row, valid);
    }
    cp_async4(&kpos[stage * kKeysPerTile + lane], slot_positions + slot, ok);
  };

  auto load_tile = [&](int stage, int t0) {
    if constexpr (kLaneOwnedRows) {
      load_rows_lane_owned(stage, t0);
      return;
    }
    bf16* kd = ks + stage * kTileElems;
    bf16* vd = vs + stage * kTileElems;
    for (int c = threadIdx.x; c < kKeysPerTile * kChunks; c += WARPS * 32) {
      const int kr = c / kChunks, kc = c % kChunks, j = t0 + kr;
      const bool valid = j < k_end;
      const int64_t slot = valid ? key_slot(p, j) : 0;
      cp_async16(&kd[kr * kStride + kc * 8], p.k_cache + slot * kv_row + g * D + kc * 8, valid);
      cp_async16(&vd[kr * kStride + kc * 8], p.v_cache + slot * kv_row + g * D + kc * 8, valid);
    }
    // The keys' logical positions (0 past the end) too, asynchronously like K/V: a plain load
    // here made every thread wait one memory round trip per tile before the tile's math (as the
    // Hopper kernel does since its start).
    if (threadIdx.x < kKeysPerTile) {
      const int j = t0 + threadIdx.x;
      const bool ok = j < k_end;
      cp_async4(&kpos[stage * kKeysPerTile + threadIdx.x],
                p.slot_positions + (ok ? key_slot(p, j) : 0), ok);
    }
  };

  const int n_tiles = k_begin < k_end ? (k_end - k_begin + kKeysPerTile - 1) / kKeysPerTile : 0;
  __shared__ ScoreRowsSmem<PREFIX ? WARPS : 1> score_rows;  // flash_tile.cuh
  if constexpr (PREFIX) stage_score_rows(p, score_rows, ra - lane / 4, R, group, warp, lane);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_tiles) load_tile(s, k_begin + s * kKeysPerTile);
    cp_async_commit();
  }

  // The rows' Q fragments, through a pointer per row computed once: indexing inside the loop
  // had the compiler redo the head's `row % group` division for each of the 32 loads.
  const bf16* q_row_a = va ? p.q + qa * qrow_stride + ha * D + (lane % 4) * 2 : nullptr;
  const bf16* q_row_b = vb ? p.q + qb * qrow_stride + hb * D + (lane % 4) * 2 : nullptr;
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const bf16* q_row = reg & 1 ? q_row_b : q_row_a;
      qf[kk][reg] =
          q_row ? *reinterpret_cast<const uint32_t*>(q_row + kk * 16 + (reg >= 2 ? 8 : 0)) : 0u;
    }

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // m: base-2, scaled
  const float scale_log2 = p.scale * 1.4426950408889634f;
  // A serial item's split being computed, and where its keys end.
  int split_now = span.first, split_end = serial ? span.split_end(span.first) : k_end;

  for (int it = 0; it < n_tiles; ++it) {
    const int t0 = k_begin + it * kKeysPerTile, stage = it % STAGES;
    // Into the buffers of tile it - 1, which every warp is done with (the barrier at the end).
    if (it + STAGES - 1 < n_tiles)
      load_tile((it + STAGES - 1) % STAGES, t0 + (STAGES - 1) * kKeysPerTile);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();  // this tile's group is complete; the later may be in flight
    __syncthreads();
    const bf16* kt = ks + stage * kTileElems;
    const bf16* vt = vs + stage * kTileElems;
    const int* kp = kpos + stage * kKeysPerTile;
    // Whether every key of this tile is visible to both rows of this lane (rows past R compute
    // garbage that is never written, so they need no mask): under block-causal, a tile whose keys
    // all lie in blocks at or before the rows' blocks.
    int tile_max = INT_MIN;  // the largest mask value of the tile's keys (block-causal needs it)
    if (p.kind == MaskKind::kBlockCausal) {
#pragma unroll
      for (int c = lane; c < kKeysPerTile; c += 32)
        tile_max = max(tile_max, key_mask_value_of(p, kp[c]));
      tile_max = __reduce_max_sync(0xffffffffu, tile_max);
    }
    const bool all_visible = tile_all_visible(p, t0, kKeysPerTile, k_end, n_cache, tile_max,
                                              min(row_a.qblk, row_b.qblk));

    float s[kKeysPerTile / 8][4];
    tile_scores<D, kKeysPerTile, kStride>(qf, kt, s, lane);

    // Mask (scores stay unscaled: online_softmax_tile folds the scale into the exponent).
    if (!all_visible) {
#pragma unroll
      for (int nt = 0; nt < kKeysPerTile / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = nt * 8 + (lane % 4) * 2 + (e & 1);
          if (!key_visible(p, e >= 2 ? row_b : row_a, t0 + col, key_mask_value_of(p, kp[col]),
                           k_end, n_cache, n_keys))
            s[nt][e] = -INFINITY;
        }
    }

    if constexpr (PREFIX)
      if (t0 < n_cache && warp_writes_scores(score_rows, warp))
        write_prefix_scores(s, p, score_rows, warp, g, group, t0, n_cache, lane);
    if constexpr (PREFIX)  // the tile holding the prefix's last key
      if (p.prefix_ml && n_cache > t0 && n_cache - t0 <= kKeysPerTile)
        prefix_stats_at_tile(s, m, l, t0, n_cache, scale_log2, lane, p.prefix_ml, split, p.kv_heads,
                             g, R, ra);
    online_softmax_tile(s, o, m, l, scale_log2);

    tile_accumulate_pv<D, kKeysPerTile, kStride>(s, vt, o, lane);
    __syncthreads();  // this stage is refilled at the next iteration's start
    if (serial && t0 + kKeysPerTile >= split_end) {  // its split's last tile: write it, afresh
      write_split_partials(p, split_now, g, R, ra, m, l, o, lane);
      reset_flash_state(m, l, o);
      ++split_now;
      split_end = min(n_keys, split_end + span.chunk);
    }
  }
  cp_async_wait<0>();
  trigger_dependent_launch();

  // The block's split (or a serial item's splits without keys: the empty state).
  for (; split_now <= span.last; ++split_now)
    write_split_partials(p, split_now, g, R, ra, m, l, o, lane);
  if constexpr (PREFIX)
    if (p.prefix_ml)
      prefix_stats_after_loop(m, l, k_begin, n_tiles, kKeysPerTile, n_cache, lane, p.prefix_ml,
                              split, p.kv_heads, g, R, ra);
  if constexpr (kIsBatchView<P>)
    if (split == batch_layout::kSerialSplit) merge_serial_splits<D / 8>(p, g, R, ra, lane);
}

// Key-list entries a batched block may keep in shared memory (1 KB: six one-warp blocks with
// 32-key tiles still fit an SM).
constexpr int kMmaKeyStage = 256;

// One sequence: grid (row blocks, KV heads, splits).
template <int D, int WARPS, int KT, int MIN_BLOCKS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
    flash_attention_kernel(AttentionParams p) {
  // Launched as a programmatic dependent (pdl_launch.h): the kernel before it wrote Q and K/V.
  ptx::wait_for_primary_grid();
  flash_attention_block<D, WARPS, KT, 2>(p, blockIdx.x, blockIdx.z);
}

// A batch: grid attention_batch_grid() over the work-item capacity; items past the plan's count
// exit at once.
template <int D, int WARPS, int KT, int MIN_BLOCKS, int STAGES, bool PREFIX = false>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
    flash_attention_batch_kernel(AttentionBatchKernelArgs a) {
  __shared__ AttentionSeqView view;
  __shared__ int32_t key_stage[kMmaKeyStage];
  if (!load_seq_view<KT, kMmaKeyStage>(a, batch_layout::kMma, view, key_stage)) return;
  ptx::wait_for_primary_grid();
  flash_attention_block<D, WARPS, KT, STAGES, AttentionSeqView, PREFIX>(view, view.row_block,
                                                                        view.split);
}

}  // namespace dllm::cuda
