// Sparse attention over a block's cached prefix (method-specs §1 MAGE, §6.1 Quest, §6.2 SparseD):
// the request knobs, what one forward asks of the backend, and the backend-independent pieces of
// selection (top-k, recall). The backends compute the scores and attend (cpu/cpu_sparse.cpp); the
// decoders say when a block selects and when it reuses (sparse_schedule.h).
//
// Decisions where the spec leaves things open (method-specs §1.5, §7):
//   - MAGE's softmax is normalised over the prefix keys only; SparseD's over every key the row
//     sees (prefix and block), as SparseD's own mask build does.
//   - The block's own keys are always attended, outside the budget k; no forced sink or local
//     tokens; Quest forces no last page (MAGE's per-block adaptation, Eq. 2).
//   - The commit forward of a block is sparse with the block's set (MAGE) or re-selected (Quest).
//   - Keys committed after a selection was made (SparseD's later blocks) were never scored and
//     are attended densely next to the selected ones.
//   - A prefix of at most k keys is attended densely, with no selection.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dllm {

enum class SparseMethod { kNone, kMage, kQuest, kSparseD };

// "none" | "mage" | "quest" | "sparsed"; Error naming --sparse otherwise.
SparseMethod parse_sparse_method(const std::string& text);
std::string to_string(SparseMethod method);

// A request's knobs (--sparse ...).
struct SparseParams {
  SparseMethod method = SparseMethod::kNone;
  int32_t k = 1024;             // prefix keys kept per (layer, KV head)
  int32_t exact_layers = 2;     // layers [0, exact_layers) always attend exactly (§1.2)
  int32_t select_queries = 0;   // MAGE: select from this many of the block's queries; 0: all
  int32_t page_size = 16;       // Quest: keys per page
  float dense_fraction = 0.2f;  // SparseD: share of all steps attended exactly before capture
  // MAGE's diagnostic (--sparse-recall, the paper's Fig. 3): every later forward of a block
  // attends exactly and selects again without keeping it; its exact top-k against the block's
  // first selection is the recall (top_k_recall), reported per request as a metric.
  bool measure_recall = false;
};

// What one forward asks of the backend (SequenceForward::sparse). The index sets live in the
// sequence's MethodState, one per (layer >= exact_layers, KV head), as logical cache slots.
struct SparseStep {
  // Run this selector on the forward's queries over the prefix (the committed cache the queries
  // see) in every sparse layer; kNone: select nothing.
  SparseMethod select = SparseMethod::kNone;
  bool keep_selection = true;    // replace the stored sets with the new selection
  bool attend_selected = false;  // attend the prefix through the stored sets (after selecting)
  bool want_selection = false;   // return the new selection (SequenceResult::sparse_selection)
  int32_t k = 1024;
  int32_t exact_layers = 2;
  int32_t select_queries = 0;
  int32_t page_size = 16;
};

// One layer's and KV head's selection: ascending logical slots of the prefix [0, prefix).
// `dense`: the prefix had at most k keys (or k / page_size pages) and every key is attended.
struct SparseSet {
  std::vector<int32_t> slots;
  int64_t prefix = 0;
  bool dense = false;
};

// The k largest scores' indices, ascending; ties go to the lower index. All of them when
// scores.size() <= k.
std::vector<int32_t> top_k_indices(std::span<const double> scores, int64_t k);

// The query rows (indices into `rows` block rows) MAGE selects from: every row when
// select_queries is 0 or >= rows, else select_queries rows spread evenly over the block
// (row floor((i + 0.5) * rows / select_queries)).
std::vector<int32_t> selection_query_rows(int64_t rows, int32_t select_queries);

// The paper's diagnostic (MAGE §5, Fig. 3), for benchmarks: forward the block's first step with
// select = kMage and want_selection, every later step with select = kMage, keep_selection = false
// and want_selection (its exact top-k, leaving the stored sets alone), then
// top_k_recall(first.sparse_selection, later.sparse_selection): |S ∩ S*| / |S*| of a block's step-1
// selection S against the exact top-k S* of a later step, averaged over every (layer, KV head) with
// a non-dense exact set. Both are SequenceResult::sparse_selection of the same layout. Returns -1
// when no set was sparse.
double top_k_recall(std::span<const SparseSet> step1, std::span<const SparseSet> later);

}  // namespace dllm
