#include "attention/sparse_schedule.h"

namespace dllm {

SparseSchedule::SparseSchedule(const SparseParams& params, int64_t total_steps)
    : params_(params),
      capture_step_(static_cast<int64_t>(static_cast<double>(total_steps) *
                                         static_cast<double>(params.dense_fraction)) +
                    1) {}

SparseStep SparseSchedule::step() const {
  SparseStep s;
  s.k = params_.k;
  s.exact_layers = params_.exact_layers;
  s.select_queries = params_.select_queries;
  s.page_size = params_.page_size;
  return s;
}

void SparseSchedule::plan(SequenceForward& fwd, int32_t block, bool denoise) {
  SparseStep s = step();
  pending_ = Pending::kNone;
  switch (params_.method) {
    case SparseMethod::kNone:
      return;
    case SparseMethod::kMage:
      if (block != selected_block_) {  // the block's first forward: exact + selection
        s.select = SparseMethod::kMage;
        selected_block_ = block;
        s.want_selection = params_.measure_recall;
        pending_ = params_.measure_recall ? Pending::kFirst : Pending::kNone;
      } else if (params_.measure_recall) {  // exact, and the exact top-k returned, not kept
        s.select = SparseMethod::kMage;
        s.keep_selection = false;
        s.want_selection = true;
        pending_ = Pending::kLater;
      } else {
        s.attend_selected = true;
      }
      break;
    case SparseMethod::kQuest:
      s.select = SparseMethod::kQuest;
      s.attend_selected = true;
      break;
    case SparseMethod::kSparseD: {
      if (!captured_ && !denoise) return;
      const int64_t step_index = denoise ? denoise_steps_++ : -1;
      if (captured_) {
        s.attend_selected = true;
      } else if (step_index < capture_step_) {
        return;  // exact early steps
      } else {
        s.select = SparseMethod::kSparseD;
        captured_ = true;
      }
      break;
    }
  }
  fwd.sparse = s;
}

void SparseSchedule::observe(const SequenceResult& result) {
  const Pending pending = pending_;
  pending_ = Pending::kNone;
  if (pending == Pending::kFirst) {
    first_selection_ = result.sparse_selection;
  } else if (pending == Pending::kLater && !first_selection_.empty()) {
    const double recall = top_k_recall(first_selection_, result.sparse_selection);
    if (recall >= 0) {  // -1: every exact set was dense (a prefix of at most k keys)
      recall_sum_ += recall;
      ++recall_steps_;
    }
  }
}

}  // namespace dllm
