// Canvas and schedule of the full (bidirectional) diffusion families, kept apart from "what to
// forward": the decoders in full_diffusion_decoder.h recompute the whole canvas every step, and
// cached variants (d2Cache, Fast-dLLM v1) can drive the same schedules with other forwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dllm {

// Whether x[begin, begin + length) holds a mask (a block of the canvas still being decoded).
bool range_has_mask(const std::vector<int32_t>& x, int32_t begin, int32_t length, int32_t mask_id);

// The k highest scores (indices into `score`, ascending); ties break toward the lower index,
// k is clamped to the size.
std::vector<int32_t> top_k_indices(const std::vector<double>& score, int32_t k);

// LLaDA's generate.py (model-specs §4.5): canvas = prompt + max_tokens masks; blocks of
// block_length start right after the prompt; the steps are split evenly over the blocks and, at
// the start of each block, into per-step counts from the masks in the block (count / steps each,
// the first count % steps steps one more). Each step unmasks the k most confident masks of the
// current block.
class LladaSchedule {
 public:
  // max_tokens must be a multiple of block_length and steps of the block count
  // (resolve_decode_params checks).
  LladaSchedule(const std::vector<int32_t>& prompt, int32_t max_tokens, int32_t block_length,
                int32_t steps, int32_t mask_id);

  bool done() const { return block_ >= num_blocks_; }
  // Masks of the current block, ascending: what the next step decides among.
  std::vector<int32_t> pending() const;
  int32_t transfer_count() const { return counts_[static_cast<size_t>(step_)]; }
  // One step: tokens[i] and confidence[i] belong to pending[i] (as returned by pending()); the
  // transfer_count() most confident are unmasked, then the step (and maybe the block) advances.
  void apply(const std::vector<int32_t>& pending, const std::vector<int32_t>& tokens,
             const std::vector<double>& confidence);

  const std::vector<int32_t>& tokens() const { return x_; }
  int32_t prompt_length() const { return prompt_len_; }
  int32_t block() const { return block_; }
  int32_t step() const { return step_; }  // within the block
  int32_t steps_per_block() const { return steps_per_block_; }

 private:
  void start_block();

  std::vector<int32_t> x_;
  int32_t prompt_len_, block_length_, steps_per_block_, mask_id_;
  int32_t num_blocks_;
  int32_t block_ = 0, step_ = 0;
  std::vector<int32_t> counts_;  // per step of the current block
};

// Dream's timesteps: float32 torch.linspace(1, eps, steps + 1) exactly as torch computes it on
// CPU and CUDA (checked bit for bit up to 2049 points): step = (eps - 1) / steps in float32, the
// first half 1 + i * step and the second eps - (steps - i) * step, each with one rounding (fma).
std::vector<float> dream_timesteps(int32_t steps, float eps);

// Dream's _sample loop (model-specs §5.3): canvas = prompt + max_tokens masks; at step i with
// t = ts[i], s = ts[i + 1]:
//   origin:      every mask is transferred with probability 1 - s/t (1 on the last step);
//   other algs:  int(masks * (1 - s/t)) masks, in float32 (all on the last step; may be 0).
class DreamSchedule {
 public:
  static constexpr float kEps = 1e-3f;  // diffusion_generate's eps

  DreamSchedule(const std::vector<int32_t>& prompt, int32_t max_tokens, int32_t steps,
                int32_t mask_id, float eps = kEps);

  bool done() const { return step_ >= steps_; }
  std::vector<int32_t> masks() const;  // mask positions, ascending
  float transfer_probability() const;  // origin
  int32_t transfer_count() const;      // the other algorithms
  // Writes tokens[i] at positions[i] and advances the step.
  void apply(const std::vector<int32_t>& positions, const std::vector<int32_t>& tokens);

  const std::vector<int32_t>& tokens() const { return x_; }
  int32_t prompt_length() const { return prompt_len_; }
  int32_t step() const { return step_; }
  int32_t steps() const { return steps_; }

 private:
  std::vector<int32_t> x_;
  int32_t prompt_len_, steps_, mask_id_;
  std::vector<float> ts_;
  int32_t step_ = 0;
};

}  // namespace dllm
