// The forward contract's attention rules evaluated per (query row, key) inside the flash-attention
// kernels (attention.cu for sm_80+, attention_sm90.cu for Hopper), so that both kernels apply
// exactly the same mask. Keys are [visible cache entries | the queries' own keys]: key index j <
// n_cache is a cache entry, j - n_cache a query. P: AttentionParams or AttentionSeqView
// (attention_seq.cuh).
#pragma once

#include <climits>

#include "backend/cuda/attention_seq.cuh"
#include "backend/cuda/kernels.h"

namespace dllm::cuda {

// What the mask needs of one query row: the query index and the value tile_all_visible compares
// (block-causal: the row's block index; causal: the query index, INT_MAX for rows past the end,
// whose garbage is never written).
struct MaskRow {
  int q = 0;
  int qblk = 0;
  bool valid = false;  // rows past the block's real rows compute garbage that is never written
};

template <class P>
__device__ __forceinline__ MaskRow mask_row(const P& p, int row, int rows, int group) {
  MaskRow r;
  r.valid = row < rows;
  r.q = row / group;
  // Block-causal compares block indices: position / block size, computed once per row and key.
  r.qblk = r.valid && p.kind == MaskKind::kBlockCausal ? p.q_positions[r.q] / p.block_size : 0;
  if (p.kind == MaskKind::kCausal) r.qblk = r.valid ? r.q : INT_MAX;
  return r;
}

// The value the mask compares per key: its logical position, or its block index under
// block-causal.
template <class P>
__device__ __forceinline__ int key_mask_value_of(const P& p, int position) {
  return p.kind == MaskKind::kBlockCausal ? position / p.block_size : position;
}

// Whether key j (key_value from key_mask_value_of) is visible to row r.
template <class P>
__device__ __forceinline__ bool key_visible(const P& p, const MaskRow& r, int j, int key_value,
                                            int k_end, int n_cache, int n_keys) {
  if (!r.valid || j >= k_end) return false;
  switch (p.kind) {
    case MaskKind::kCausal:
      return j < n_cache || j - n_cache <= r.q;
    case MaskKind::kBidirectional:
      return true;
    case MaskKind::kBlockCausal:
      return key_value <= r.qblk;
    case MaskKind::kCustom:
      return p.custom_mask_queries_only
                 ? j < n_cache ||
                       p.custom_mask[static_cast<int64_t>(r.q) * p.n_q + (j - n_cache)] != 0
                 : p.custom_mask[static_cast<int64_t>(r.q) * n_keys + j] != 0;
  }
  return false;
}

// Whether key j sits at position j (AttentionBatchSeq::keys_at_positions); single-sequence calls
// do not say.
__device__ __forceinline__ bool keys_at_positions(const AttentionParams&) {
  return false;
}
__device__ __forceinline__ bool keys_at_positions(const AttentionSeqView& v) {
  return v.keys_at_positions;
}

// One past the last key that rows up to last_row (rows are query-major: row / group is the query)
// may see, where the rule says so by key index: causal (query q sees keys up to n_cache + q), and
// block-causal when key j sits at position j. Tiles past it are masked whole for every row of the
// block, so a kernel may skip them with the same bits: a masked tile adds nothing to l and scales
// o by 1 once a row has seen a key, and every row sees key 0 first (a long prefill's row blocks
// otherwise compute the whole square and mask half of it).
template <class P>
__device__ __forceinline__ int visible_keys_end(const P& p, int last_row, int group, int n_cache,
                                                int n_keys) {
  const int q = last_row / group;
  if (p.kind == MaskKind::kCausal) return min(n_keys, n_cache + q + 1);
  if (p.kind == MaskKind::kBlockCausal && keys_at_positions(p))
    return min(n_keys, (p.q_positions[q] / p.block_size + 1) * p.block_size);
  return n_keys;
}

// Whether every key of the tile [t0, t0 + tile_keys) is visible to every row whose MaskRow::qblk
// is at least qblk_min (tile_max_value: the largest key_mask_value_of of the tile's keys). Such
// tiles skip the per-key mask — every tile of the cache in a denoising step, and under causal
// every tile below a row block's diagonal.
template <class P>
__device__ __forceinline__ bool tile_all_visible(const P& p, int t0, int tile_keys, int k_end,
                                                 int n_cache, int tile_max_value, int qblk_min) {
  if (t0 + tile_keys > k_end) return false;
  switch (p.kind) {
    case MaskKind::kCausal:  // query q sees the keys up to n_cache + q
      return int64_t{t0} + tile_keys <= int64_t{n_cache} + qblk_min + 1;
    case MaskKind::kBidirectional:
      return true;
    case MaskKind::kBlockCausal:
      return tile_max_value <= qblk_min;
    case MaskKind::kCustom:
      return p.custom_mask_queries_only && t0 + tile_keys <= n_cache;
  }
  return false;
}

}  // namespace dllm::cuda
