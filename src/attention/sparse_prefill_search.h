// MMInference's offline pattern search (method-specs §2.7; microsoft/MInference
// minference/modules/mminference.py pattern_search_attn_delta): per layer and query head, score
// every candidate pattern by attention-mass recall against the dense softmax and keep the best.
//
// As the published code: candidates are tried in order and one replaces the best only when its
// recall is larger by more than min_gain (1e-2); grid candidates try the phases {0, 1, stride-1}
// and keep their best; recall is mean_r sum_c A[r, c] * mask[r, c] over the vision rows (all rows
// without a vision span). Ours, where the code is silent or differs:
//   - the mask scored is the plan that would run (build_head_plan), not a separate formula;
//   - A is normalised over every key the row sees (the code slices the vision x vision block out
//     of the full-row softmax: the same numbers for the rows, text keys left out of the sum);
//   - rows are sampled (sample_rows, evenly spaced) so that long calibration prompts stay
//     cheap; the code scores every row up to 25K tokens and refuses longer ones;
//   - a FLOPs budget: candidates whose density (attended / causal keys, over the scored rows)
//     exceeds max_density are skipped (the code equalises its candidates by hand instead);
//   - the searched grid stride ("stride" in the code's config) is estimated online
//     (estimate_grid), also at run time: the config keeps stride 0.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "attention/sparse_prefill_patterns.h"

namespace dllm {

struct SearchCandidate {
  std::string label;
  HeadPattern pattern;
};

// The published search space, in its order: grid(frame_stride, vline, +-hline, local 1024),
// A-shape (128, 4096), grid(searched stride, ...), vertical-slash (1000, 1024 | 2048, last_q
// 257). The searched grid is stride 0: estimated online (estimate_grid) where it runs, as the
// paper's Alg. 1 does; frame_stride 0 leaves the frame grids out.
std::vector<SearchCandidate> published_search_space(int32_t frame_stride);

struct SearchOptions {
  double max_density = 1.0;
  double min_gain = 1e-2;
  int32_t sample_rows = 1024;
};

struct CandidateScore {
  std::string label;
  HeadPattern pattern;  // with the grid phase that scored best
  double recall = 0, density = 0;
  bool over_budget = false;
};

struct HeadSearchResult {
  HeadPattern best;  // dense when no candidate fits the budget
  std::string label = "dense";
  double recall = 1, density = 1;
  std::vector<CandidateScore> scores;  // every candidate, in search order
};

HeadSearchResult search_head_pattern(const HeadQK& qk, const PrefillLayout& layout,
                                     const std::vector<SearchCandidate>& candidates,
                                     const SearchOptions& options);

// Recall and density of one head plan over the given rows: the dense softmax mass the plan keeps
// and its keys over the family rule's keys.
std::pair<double, double> plan_recall(const SparseHeadPlan& plan, const HeadQK& qk,
                                      const PrefillLayout& layout,
                                      const std::vector<int32_t>& rows);

}  // namespace dllm
