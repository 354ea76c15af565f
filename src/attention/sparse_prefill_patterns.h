// The sparse prefill patterns of MInference 1.0 and MMInference (method-specs §2.1-2.6), each
// compiled to a SparseHeadPlan (sparse_prefill_plan.h). Online index estimation (vertical-slash,
// block-sparse, grid stride/phase, per-modality VS) reads the head's fp32 Q and K on the host.
//
// Semantics followed (microsoft/MInference, read 2026-11-25; docs/mminference.md lists where the
// spec, the paper and the code disagree):
//   - A-shape: row r sees keys [0, sink) and (r - local, r]      (streaming_kernel, a_shape()).
//   - Tri-shape: A-shape, but the last n_last rows see every key  (tri_shape_kernel).
//   - Vertical-slash: estimated from the last last_q queries; the first 30 columns and the 100
//     nearest diagonals always kept; executed through MInference's index conversion
//     (convert_vertical_slash_indexes: 64-row blocks, merged 64-wide diagonal bands as block
//     offsets, the verticals outside the bands as gathered columns).
//   - Block-sparse: 64x64 blocks, mean-pooled Q and K, causal top-k key blocks per query block
//     (plus the diagonal block, which MInference's kernel always computes).
//   - Grid (vision span [v_begin, v_end)): rows before the span and after it attend densely
//     (tri-shape's sink / last rows); a vision row sees the keys before the span (sink), its
//     local band of `local` keys, and with vline every key v_begin + phase + k * stride; with
//     hline the rows v_begin + phase + k * stride attend densely (grid_attn / _ref_attention).
//     Without a vision span the whole prompt is the span (the published default boundaries).
//   - Q-boundary (mix_modality_vs): per modality, VS indices from the last <= 64 queries of that
//     modality's last span over the keys before its end; a row uses its modality's indices,
//     converted for its original 64-row block (rows stay in place; a block with several
//     modalities becomes one tile per modality).
//   - 2D-boundary (the paper's Alg. 3 / 7; the published code has it only commented out): rows
//     and keys grouped by modality. A row of modality m sees its own modality's keys through a
//     VS over the modality-compacted rows and keys (estimated from m's last <= 64 queries,
//     converted per 64 compacted rows, the diagonal-block rule in compacted keys), and every
//     other modality's keys through the top `vertical` columns those queries attend there
//     (ours: no slashes across modalities; under block-causal, other modalities' keys inside a
//     row's block are visible only through those columns).
// Block-causal families (SDAR, B = 4): every rule above uses limit(r) (sparse_prefill_plan.h) for
// "r"; the diagonal-block rule adds the keys (end of the row block, limit(last row)] where a
// pattern's bands stop short of them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attention/sparse_prefill_plan.h"

namespace dllm {

// One head's fp32 queries and keys: row r at q + r * q_stride (keys likewise), head_dim dims.
struct HeadQK {
  const float* q = nullptr;
  const float* k = nullptr;
  int64_t q_stride = 0;
  int64_t k_stride = 0;
  int head_dim = 0;
};

// The prompt layout a plan is built for.
struct PrefillLayout {
  int32_t n_tokens = 0;
  int32_t block_size = 1;         // 1: causal; B: block-causal
  std::vector<uint8_t> modality;  // per token (vision/modality.h values); empty: all text
  int32_t vision_begin = 0;       // grid heads: the vision span [vision_begin, vision_end)
  int32_t vision_end = 0;
  int32_t frame_stride = 0;  // tokens per video frame (0: unknown)
};

enum class PatternKind { kDense, kAShape, kTriShape, kVerticalSlash, kBlockSparse, kGrid };
enum class BoundaryKind { kNone, kQ, k2D };

struct GridParams {
  int32_t stride = 0;  // 0: search it online (estimate_grid)
  int32_t phase = 0;
  bool hline = false;
  bool vline = true;
  int32_t local = 1024;
};

// One query head's pattern: what a config entry holds (sparse_prefill_config.h).
struct HeadPattern {
  PatternKind kind = PatternKind::kDense;
  BoundaryKind boundary = BoundaryKind::kNone;
  int32_t sink = 128, local = 4096;       // A-shape, tri-shape
  int32_t n_last = 100;                   // tri-shape
  int32_t vertical = 1000, slash = 6096;  // vertical-slash (and the boundary forms)
  int32_t last_q = 64;                    // vertical-slash / grid estimation queries
  int32_t top_blocks = 100;               // block-sparse
  GridParams grid;
};

std::string to_string(PatternKind kind);

// Vertical-slash indices: key columns ascending, diagonal offsets (row - column) descending.
struct VsIndices {
  std::vector<int32_t> verticals;
  std::vector<int32_t> slashes;
};

// MInference 1.0's online estimation: softmax of queries [q_begin, q_end) against keys
// [0, q_end) (family rule applied), column sums and diagonal sums; the first init_window columns
// and the local_window nearest diagonals forced in; top `vertical` / `slash` (at least 30 / 50,
// at most q_end). Diagonals with negative offsets (inside a block-causal block) are not scored:
// the diagonal-block rule attends them.
VsIndices estimate_vertical_slash(const HeadQK& qk, const PrefillLayout& layout, int32_t q_begin,
                                  int32_t q_end, int32_t vertical, int32_t slash,
                                  int32_t init_window = 30, int32_t local_window = 100);

// MInference's convert_vertical_slash_indexes for one 64-row block [start_m, start_m + 64):
// appends the merged bands as contiguous spans and the verticals outside them as one gathered
// span to the open tile (keys clipped to [0, key_end)).
// With key_positions (2D-boundary: a modality's keys, compacted), idx and the block are in
// compacted coordinates: spans address keys through key_map[key_map_offset + ...] and gathered
// columns are stored as positions.
void add_vertical_slash_spans(SparseHeadPlan& head, const VsIndices& idx, int32_t start_m,
                              int32_t key_end, int32_t key_map_offset = -1,
                              const std::vector<int32_t>* key_positions = nullptr);

// The online grid search (MMInference Alg. 1): for every stride in `strides`, fold the last
// last_q queries' attention over the vision keys by stride and take the phase with the most
// mass. The paper's "max(V)" comparison is UNCONFIRMED (raw mass always favours stride 1); ours:
// the stride whose best phase class has the largest mass share minus its density 1 / stride,
// ties to the smaller stride.
GridParams estimate_grid(const HeadQK& qk, const PrefillLayout& layout,
                         std::span<const int32_t> strides, int32_t last_q, GridParams base);

// The strides a grid head searches online when its config leaves stride 0: 2 .. min(1024,
// half the vision span) (the paper's max_stride) and the frame stride.
std::vector<int32_t> grid_stride_space(const PrefillLayout& layout);

// Vertical-slash and Q-boundary plans from given indices (Q-boundary: idx[modality]).
SparseHeadPlan plan_vertical_slash(const PrefillLayout& layout, const VsIndices& idx);
SparseHeadPlan plan_q_boundary(const PrefillLayout& layout, const std::vector<VsIndices>& idx);

// The plan of one head for `pattern` (estimating what it needs from qk).
SparseHeadPlan build_head_plan(const HeadPattern& pattern, const PrefillLayout& layout,
                               const HeadQK& qk);

}  // namespace dllm
