// When a block-diffusion decoder's forwards select sparse index sets and when they attend
// through them (method-specs §1.4, §6.1, §6.2). The block decoders (SDAR and LLaDA2.x, Fast-dLLM
// v2) call plan() on every denoising and commit forward; prefills stay exact.
//   MAGE:    a block's first forward attends exactly and selects from its (all-[MASK]) queries;
//            every later forward of the block, its commit included, attends through that set.
//   Quest:   every forward selects pages from its own queries and attends through them.
//   SparseD: denoising steps 0..end-1 attend exactly, step end (end = int(total * fraction) + 1,
//            SparseD's skip rule, counted over all blocks) attends exactly and captures the
//            pattern; every later forward attends through it, never refreshed.
// With SparseParams::measure_recall (MAGE only), later forwards attend exactly instead and
// observe() scores their exact top-k against the block's first selection.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/sparse_attention.h"
#include "backend/forward_batch.h"

namespace dllm {

class SparseSchedule {
 public:
  // total_steps: the request's nominal denoising steps over all its blocks (SparseD's capture).
  SparseSchedule(const SparseParams& params, int64_t total_steps);

  // Adds fwd.sparse for a forward of block `block` (absolute block index); `denoise`: a
  // denoising step, else the block's commit.
  void plan(SequenceForward& fwd, int32_t block, bool denoise);

  int64_t capture_step() const { return capture_step_; }

  // The result of the forward plan() last planned (measure_recall: keeps a block's first
  // selection, scores every later one against it; otherwise nothing).
  void observe(const SequenceResult& result);
  bool measuring_recall() const { return params_.measure_recall; }
  // measure_recall: the mean recall over the scored forwards (-1 when none) and their count.
  double mean_recall() const { return recall_steps_ > 0 ? recall_sum_ / recall_steps_ : -1.0; }
  int64_t recall_steps() const { return recall_steps_; }

 private:
  SparseStep step() const;
  enum class Pending { kNone, kFirst, kLater };  // what the last planned forward selected

  SparseParams params_;
  int64_t capture_step_ = 0;
  int64_t denoise_steps_ = 0;    // SparseD: denoising forwards planned so far
  int32_t selected_block_ = -1;  // MAGE: the block whose set is stored
  bool captured_ = false;        // SparseD
  Pending pending_ = Pending::kNone;
  std::vector<SparseSet> first_selection_;  // measure_recall: the block's step-1 sets
  double recall_sum_ = 0;
  int64_t recall_steps_ = 0;
};

}  // namespace dllm
