// MMInference / MInference sparse prefill (method-specs §2, §6.5): the one format every pattern
// compiles to and every backend executes (cpu: sparse_prefill_cpu.cpp, cuda:
// backend/cuda/sparse_prefill.cu). The FlashInfer way: one kernel core, variants by index source
// (a key span's addressing) and mask rule (the span's window rule, the family's causal rule).
//
// A plan covers one sequence of n prompt tokens (logical position = index) and one query head.
// Its query tiles hold up to kSparseTileRows rows each, given as explicit row indices (grid and
// boundary heads permute rows by index loads, never by a physical transpose). Every row of the
// sequence is in exactly one tile. Each tile lists key spans; a row r attends key c iff some
// span of its tile yields c and
//   c <= limit(r)                      (the family rule: causal, or block-causal with block B:
//                                       limit(r) = min(n-1, (r / B + 1) * B - 1))
//   and the span's window rule holds:  window > 0: c > limit(r) - window   (a local band)
//                                      window < 0: c <= limit(r) + window  (outside the band)
//                                      window = 0: no further rule.
// Spans of one tile never yield the same key for the same row (validate_plan checks it in tests),
// so the kernels need no deduplication.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dllm {

inline constexpr int kSparseTileRows = 64;  // rows per query tile (MInference's BLOCK_M)
inline constexpr int kSparseKeyBlock = 64;  // MInference's BLOCK_N: VS block offsets are 64 wide

// Keys begin + i * step (i < count), or with map_offset >= 0 the keys
// key_map[map_offset + begin + i * step] (gathered columns, modality-compacted keys).
struct KeySpan {
  int32_t begin = 0;
  int32_t count = 0;
  int32_t step = 1;
  int32_t window = 0;
  int32_t map_offset = -1;
};

struct QueryTile {
  int32_t first_row = 0;  // into SparseHeadPlan::rows
  int32_t row_count = 0;  // 1 .. kSparseTileRows
  int32_t first_span = 0;
  int32_t span_count = 0;
};

struct SparseHeadPlan {
  std::vector<int32_t> rows;  // the tiles' query rows, tile by tile
  std::vector<QueryTile> tiles;
  std::vector<KeySpan> spans;
  std::vector<int32_t> key_map;  // gathered key indices that spans address through map_offset

  // Starts a tile; rows and spans are appended after it.
  QueryTile& open_tile();
  void add_row(int32_t row);
  void add_span(const KeySpan& span);
  // Appends key indices to key_map and returns their offset (for KeySpan::map_offset).
  int32_t add_key_list(const std::vector<int32_t>& keys);
};

struct SparsePrefillPlan {
  int32_t n_tokens = 0;
  int32_t block_size = 1;             // 1: causal; B > 1: block-causal (SDAR: 4)
  std::vector<SparseHeadPlan> heads;  // one per query head
};

// limit(r) of the family rule above.
inline int32_t sparse_key_limit(int32_t row, int32_t n_tokens, int32_t block_size) {
  const int64_t lim = (static_cast<int64_t>(row) / block_size + 1) * block_size - 1;
  return static_cast<int32_t>(lim < n_tokens - 1 ? lim : n_tokens - 1);
}

// The key the span yields at index i.
inline int32_t span_key(const SparseHeadPlan& head, const KeySpan& s, int32_t i) {
  const int32_t at = s.begin + i * s.step;
  return s.map_offset >= 0 ? head.key_map[static_cast<size_t>(s.map_offset) + at] : at;
}

// Whether the span's window rule and the family rule admit key c for a row with limit `lim`.
inline bool span_admits(const KeySpan& s, int32_t c, int32_t lim) {
  if (c < 0 || c > lim) return false;
  if (s.window > 0) return c > lim - s.window;
  if (s.window < 0) return c <= lim + s.window;
  return true;
}

// The dense 0/1 mask [n, n] a head's plan attends (row-major). Checks the plan's invariants on
// the way (every row in exactly one tile, no key twice for a row, indices in range) and fails
// with an Error naming the first violation.
std::vector<uint8_t> plan_mask(const SparsePrefillPlan& plan, int head);

// Keys attended / keys of the family rule, over every row and head: the density the FLOPs
// budget is stated in.
double plan_density(const SparsePrefillPlan& plan);

}  // namespace dllm
