// One sequence of a batched attention call, as the flash kernels see it. The kernels' bodies are
// templates over their parameter source: AttentionParams (one sequence, kernel parameters) or an
// AttentionSeqView — the same fields, for the sequence of the block's work item, filled from the
// planner's region (attention_batch_layout.h) into shared memory by load_seq_view(). Shared
// memory, not registers: the Hopper kernel has no registers to spare, and the compiler reloads the
// fields after each barrier instead of holding them through the main loop.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_batch_layout.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"

namespace dllm::cuda {

struct AttentionSeqView {
  const bf16* q;  // this sequence's first query row
  const bf16* k_cache;
  const bf16* v_cache;
  // Key addressing: the physical slot of key j is key_slots[j - key_base] (a key list), else
  // page_table[(j >> page_shift) - page_base] << page_shift | j % page_size (a paged range), else
  // j. The block's split of the list or table sits in shared memory (stage_split_keys()) when it
  // fits, else these point at the plan in global memory (bases 0).
  const int32_t* key_slots;
  const int32_t* page_table;
  int key_base, page_base;
  const int32_t* slot_positions;
  const int32_t* q_positions;  // this sequence's
  const uint8_t* custom_mask;
  bf16* partial_o;  // this sequence's first partial row
  float* partial_ml;
  bf16* out;         // this sequence's first output row
  float* prefix_ml;  // its first prefix-only (m, l) row (AttentionBatchSeq::prefix_lse), or null
  // AttentionBatchSeq::score_queries: its raw prefix scores, each query's index among them (or
  // -1), their count; null without.
  float* prefix_scores;
  const int32_t* score_map;
  int score_queries;
  int n_keys, n_q, heads, kv_heads, splits, block_size, page_shift;
  int row_block, split, merge_pair;  // the work item
  int split_last;                    // its last split (kItemSplitLast)
  int kv_head;                       // the block's KV head
  float scale;
  MaskKind kind;
  bool custom_mask_queries_only;
  bool keys_at_positions;  // AttentionBatchSeq::keys_at_positions
  // What load_seq_view() stages: stage_count ints from stage_src[stage_first ..], or with
  // stage_expand the slots of keys stage_first .. through the page table stage_src.
  const int32_t* stage_src;
  int stage_first, stage_count;
  bool stage_expand;
};

// Whether the parameter source is a batch item's view (which may be a serial item).
template <class P>
constexpr bool kIsBatchView = std::is_same_v<P, AttentionSeqView>;

// The block's KV head: blockIdx.y for a single-sequence call, the view's for a batch item.
__device__ __forceinline__ int kv_head_of(const AttentionParams&) {
  return blockIdx.y;
}
__device__ __forceinline__ int kv_head_of(const AttentionSeqView& v) {
  return v.kv_head;
}

// A batched block's (work item, KV head): block (x, y) takes item x for KV head y, or with
// heads_inner item y for KV head x.
__device__ __forceinline__ int2 batch_block_item(const AttentionBatchKernelArgs& a) {
  return a.heads_inner ? make_int2(blockIdx.y, blockIdx.x) : make_int2(blockIdx.x, blockIdx.y);
}

// Keys of the sequence (AttentionParams: read from device memory at the call).
__device__ __forceinline__ int seq_n_keys(const AttentionParams& p) {
  return *p.n_keys;
}
__device__ __forceinline__ int seq_n_keys(const AttentionSeqView& v) {
  return v.n_keys;
}

// The K/V row (slot of the cache / pool) of key j.
__device__ __forceinline__ int key_slot(const AttentionParams& p, int j) {
  return p.key_slots ? p.key_slots[j] : j;
}
// Paged: logical slot j lives at page_table[j / page_size] * page_size + j % page_size; pages of
// a 32/64-key tile need not be adjacent, so every key row is addressed on its own.
__device__ __forceinline__ int key_slot(const AttentionSeqView& v, int j) {
  if (v.key_slots) return v.key_slots[j - v.key_base];
  if (v.page_table) return paged_slot(v.page_table, j, v.page_shift, v.page_base);
  return j;
}

// The keys [begin, end) of split `split` of n_keys: equal shares in whole tiles. Both kernels
// and stage_split_keys() share them out this way.
struct KeyRange {
  int begin, end;
};
__device__ __forceinline__ KeyRange split_keys(int n_keys, int splits, int split, int tile_keys) {
  const int chunk = ((n_keys + splits - 1) / splits + tile_keys - 1) / tile_keys * tile_keys;
  const int begin = split * chunk;
  return {begin, min(n_keys, begin + chunk)};
}

// The splits one block computes — split `split`, splits `split` .. `last` of a split group, or
// with batch_layout::kSerialSplit all of them, in order — and the keys [k_begin, k_end) they cover:
// consecutive whole tiles, since every split but the last ends on a tile boundary (split_keys());
// split s ends at split_end(s), the next `chunk` keys later. Masks may take k_end for every tile:
// before a split's own end they test keys of that split only.
struct SplitSpan {
  int first, last;  // splits
  int chunk;        // keys per split (0: no keys)
  int k_begin, k_end;
  int n_keys;
  __device__ __forceinline__ int split_end(int split) const {
    return min(n_keys, (split + 1) * chunk);
  }
};
__device__ __forceinline__ SplitSpan split_span(int n_keys, int splits, int split, int last,
                                                int tile_keys) {
  SplitSpan s;
  s.chunk = ((n_keys + splits - 1) / splits + tile_keys - 1) / tile_keys * tile_keys;
  s.first = split < 0 ? 0 : split;
  s.last = split < 0 ? splits - 1 : last;
  s.n_keys = n_keys;
  s.k_begin = min(n_keys, s.first * s.chunk);
  s.k_end = min(n_keys, (s.last + 1) * s.chunk);
  return s;
}

// The last split a block computes: its own (one sequence's call), or its item's (a batch item:
// all of a serial item's, the group's last of a split group).
__device__ __forceinline__ int split_last_of(const AttentionParams&, int split) {
  return split;
}
__device__ __forceinline__ int split_last_of(const AttentionSeqView& v, int split) {
  return split < 0 ? v.splits - 1 : v.split_last;
}

// Fills `v` (shared memory) with the sequence of this block's work item in the list of kernel
// `kind` (batch_layout::kMma / kSm90); false (for the whole block) on padding items past the
// plan's count. Reads only the plan, which the caller copied before the step's first kernel, so
// it runs before the programmatic-launch wait (the caller waits after it). Padding blocks wait
// too before they exit: a kernel completes after its predecessor only if all its blocks waited,
// and the combine pass relies on that order across the call's two attention kernels.
//
// The physical slots of the block's keys are staged in `stage` (STAGE ints of shared memory) when
// they fit, else the pages they lie on: the tile loads then find each key row's slot in shared
// memory instead of waiting on global loads each tile (that wait delays the next tile's loads:
// with two pipeline stages, their issue is on the critical path).
template <int TILE_KEYS, int STAGE>
__device__ __forceinline__ bool load_seq_view(const AttentionBatchKernelArgs& a, int kind,
                                              AttentionSeqView& v, int32_t* stage) {
  namespace L = batch_layout;
  const int32_t* plan = a.plan;
  const int2 item_head = batch_block_item(a);
  const int item = item_head.x;
  // Warp 0 reads the header, then the work item (with its descriptor), one int per lane: two
  // memory round trips before the stage's, where thread 0 alone had three (count, list offset,
  // fields) — each costs every block of a short split a good share of its life.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const int header = lane < L::kHeaderInts ? plan[lane] : 0;
    const int count = __shfl_sync(0xffffffffu, header, L::kItemCount + kind);
    const int items_at = __shfl_sync(0xffffffffu, header, L::kItemsAt + kind);
    const bool real = item < count;
    const int32_t* w = plan + items_at + static_cast<int64_t>(item) * L::kItemInts;
    const int word = real && lane < L::kItemInts ? w[lane] : 0;
    auto field = [&](int i) { return __shfl_sync(0xffffffffu, word, i); };
    auto desc = [&](int i) { return field(L::kItemDesc + i); };
    const int64_t q_row = desc(L::kQRow);
    const int64_t partial_row = desc(L::kPartialRow);
    const int mask_at = desc(L::kMaskAt), keys_at = desc(L::kKeysAt), pages_at = desc(L::kPagesAt);
    const int keys_head_stride = desc(L::kKeysHeadStride);
    const int prefix_row = desc(L::kPrefixRow);
    const int score_map_at = desc(L::kScoreMapAt), score_queries = desc(L::kScoreQueries);
    const int scores_at = desc(L::kScoresAt);
    const int n_keys = desc(L::kNKeys), n_q = desc(L::kNQ), splits = desc(L::kSplits);
    const int block_size = desc(L::kBlockSize), mask_kind = desc(L::kKind);
    const int queries_only = desc(L::kMaskQueriesOnly);
    const int keys_at_positions = desc(L::kKeysAtPositions);
    const int row_block = field(L::kItemRowBlock), split = field(L::kItemSplit);
    const int split_last = field(L::kItemSplitLast);
    const int pair = field(L::kItemPair);
    if (lane == 0) {
      const int64_t row_elems = static_cast<int64_t>(a.heads) * a.head_dim;
      v.splits = real ? splits : 0;  // 0: a padding item
      v.q = a.q + q_row * row_elems;
      v.k_cache = a.k_pool;
      v.v_cache = a.v_pool;
      v.slot_positions = a.slot_positions;
      v.q_positions = a.q_positions + q_row;
      v.custom_mask = mask_at >= 0 ? reinterpret_cast<const uint8_t*>(plan) + mask_at : nullptr;
      v.partial_o = a.partial_o + partial_row * a.head_dim;
      v.partial_ml = a.partial_ml + partial_row * 2;
      v.out = a.out + q_row * row_elems;
      v.prefix_ml =
          prefix_row >= 0 && a.prefix_ml ? a.prefix_ml + int64_t{prefix_row} * 2 : nullptr;
      const bool scores = score_map_at >= 0 && a.prefix_scores;
      v.prefix_scores = scores ? a.prefix_scores + scores_at : nullptr;
      v.score_map = scores ? plan + score_map_at : nullptr;
      v.score_queries = scores ? score_queries : 0;
      v.n_keys = n_keys;
      v.n_q = n_q;
      v.heads = a.heads;
      v.kv_heads = a.kv_heads;
      v.block_size = block_size;
      v.page_shift = a.page_shift;
      v.row_block = row_block;
      v.split = split;
      v.split_last = split_last;
      v.merge_pair = pair;
      v.kv_head = item_head.y;
      v.scale = a.scale;
      v.kind = static_cast<MaskKind>(mask_kind);
      v.custom_mask_queries_only = queries_only != 0;
      v.keys_at_positions = keys_at_positions != 0;
      // Which addressing, and what of it this split stages: its keys' physical slots (a key
      // list's entries, or a paged range's slots computed here once) when they fit, else its
      // pages.
      const KeyRange keys =
          split < 0 ? KeyRange{0, n_keys}  // a serial item: every split
                    : KeyRange{split_keys(n_keys, max(splits, 1), split, TILE_KEYS).begin,
                               split_keys(n_keys, max(splits, 1), split_last, TILE_KEYS).end};
      // A per-KV-head key list (sparse attention): this block's head's.
      const int32_t* list =
          keys_at >= 0 ? plan + keys_at + static_cast<int64_t>(keys_head_stride) * item_head.y
                       : nullptr;
      const int32_t* table = pages_at >= 0 ? plan + pages_at : nullptr;
      const int n = max(keys.end - keys.begin, 0);
      const int first_page = keys.begin >> a.page_shift;
      const int pages = n > 0 ? ((keys.end - 1) >> a.page_shift) - first_page + 1 : 0;
      const bool slots = (list || table) && n <= STAGE;
      const bool paged = !slots && table && pages <= STAGE;
      v.key_slots = slots ? stage : list;
      v.key_base = slots ? keys.begin : 0;
      v.page_table = paged ? stage : table;
      v.page_base = paged ? first_page : 0;
      v.stage_src = list ? list : table;
      v.stage_first = slots ? keys.begin : first_page;
      v.stage_count = real ? (slots ? n : paged ? pages : 0) : 0;
      v.stage_expand = slots && !list;
    }
  }
  __syncthreads();
  if (v.splits == 0) {
    ptx::wait_for_primary_grid();
    return false;
  }
  if (v.stage_count > 0) {
    const int32_t* src = v.stage_src;
    const int first = v.stage_first, shift = v.page_shift;
    for (int i = threadIdx.x; i < v.stage_count; i += blockDim.x) {
      const int j = first + i;
      stage[i] = v.stage_expand ? paged_slot(src, j, shift) : src[j];
    }
    __syncthreads();
  }
  return true;
}

}  // namespace dllm::cuda
