// When a block-diffusion decoder's forwards select sparse index sets and when they attend
// through them (method-specs §1.4, §6.1, §6.2). The block decoders (SDAR and LLaDA2.x, Fast-dLLM
// v2) call plan() on every denoising and commit forward; prefills stay exact.
//   MAGE:    a block's first forward attends exactly and selects from its (all-[MASK]) queries;
//            every later forward of the block, its commit included, attends through that set.
//   Quest:   every forward selects pages from its own queries and attends through them.
//   SparseD: denoising steps 0..end-1 attend exactly, step end (end = int(total * fraction) + 1,
//            SparseD's skip rule, counted over all blocks) attends exactly and captures the
//            pattern; every later forward attends through it, never refreshed.
#pragma once

#include <cstdint>

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

 private:
  SparseStep step() const;

  SparseParams params_;
  int64_t capture_step_ = 0;
  int64_t denoise_steps_ = 0;    // SparseD: denoising forwards planned so far
  int32_t selected_block_ = -1;  // MAGE: the block whose set is stored
  bool captured_ = false;        // SparseD
};

}  // namespace dllm
