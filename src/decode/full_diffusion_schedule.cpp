#include "decode/full_diffusion_schedule.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "decode/block_schedule.h"

namespace dllm {

bool range_has_mask(const std::vector<int32_t>& x, int32_t begin, int32_t length, int32_t mask_id) {
  for (int32_t j = begin; j < begin + length; ++j)
    if (x[static_cast<size_t>(j)] == mask_id) return true;
  return false;
}

std::vector<int32_t> top_k_indices(const std::vector<double>& score, int32_t k) {
  std::vector<int32_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)];
  });
  order.resize(std::min(order.size(), static_cast<size_t>(std::max(k, 0))));
  std::sort(order.begin(), order.end());
  return order;
}

// ---------------------------------------------------------------------------------------- LLaDA

LladaSchedule::LladaSchedule(const std::vector<int32_t>& prompt, int32_t max_tokens,
                             int32_t block_length, int32_t steps, int32_t mask_id)
    : x_(prompt),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      block_length_(block_length),
      mask_id_(mask_id) {
  if (block_length <= 0 || max_tokens % block_length != 0)
    fail("LLaDA: the block length ", block_length, " must divide the generation length ",
         max_tokens);
  num_blocks_ = max_tokens / block_length;
  if (steps <= 0 || steps % num_blocks_ != 0)
    fail("LLaDA: the steps ", steps, " must be a positive multiple of the block count ",
         num_blocks_);
  steps_per_block_ = steps / num_blocks_;
  x_.insert(x_.end(), static_cast<size_t>(max_tokens), mask_id_);
  start_block();
}

void LladaSchedule::start_block() {
  step_ = 0;
  if (done()) return;
  const auto begin = x_.begin() + prompt_len_ + block_ * block_length_;
  const int32_t masks = static_cast<int32_t>(std::count(begin, begin + block_length_, mask_id_));
  counts_ = transfer_schedule(masks, steps_per_block_);
}

std::vector<int32_t> LladaSchedule::pending() const {
  std::vector<int32_t> out;
  const int32_t s = prompt_len_ + block_ * block_length_;
  for (int32_t i = s; i < s + block_length_; ++i)
    if (x_[static_cast<size_t>(i)] == mask_id_) out.push_back(i);
  return out;
}

void LladaSchedule::apply(const std::vector<int32_t>& pending, const std::vector<int32_t>& tokens,
                          const std::vector<double>& confidence) {
  for (int32_t i : top_k_indices(confidence, transfer_count()))
    x_[static_cast<size_t>(pending[static_cast<size_t>(i)])] = tokens[static_cast<size_t>(i)];
  if (++step_ == steps_per_block_) {
    ++block_;
    start_block();
  }
}

// ---------------------------------------------------------------------------------------- Dream

std::vector<float> dream_timesteps(int32_t steps, float eps) {
  const int32_t n = steps + 1;
  std::vector<float> ts(static_cast<size_t>(n));
  const float step = (eps - 1.0f) / static_cast<float>(n - 1);
  const int32_t half = n / 2;
  for (int32_t i = 0; i < n; ++i)
    ts[static_cast<size_t>(i)] = i < half ? std::fma(step, static_cast<float>(i), 1.0f)
                                          : std::fma(-step, static_cast<float>(n - 1 - i), eps);
  return ts;
}

DreamSchedule::DreamSchedule(const std::vector<int32_t>& prompt, int32_t max_tokens, int32_t steps,
                             int32_t mask_id, float eps)
    : x_(prompt),
      prompt_len_(static_cast<int32_t>(prompt.size())),
      steps_(steps),
      mask_id_(mask_id) {
  if (steps <= 0) fail("Dream: steps must be positive (got ", steps, ")");
  x_.insert(x_.end(), static_cast<size_t>(max_tokens), mask_id_);
  ts_ = dream_timesteps(steps, eps);
}

std::vector<int32_t> DreamSchedule::masks() const {
  std::vector<int32_t> out;
  for (size_t i = 0; i < x_.size(); ++i)
    if (x_[i] == mask_id_) out.push_back(static_cast<int32_t>(i));
  return out;
}

float DreamSchedule::transfer_probability() const {
  if (step_ >= steps_ - 1) return 1.0f;
  const float t = ts_[static_cast<size_t>(step_)], s = ts_[static_cast<size_t>(step_ + 1)];
  return 1.0f - s / t;
}

int32_t DreamSchedule::transfer_count() const {
  const auto masks = static_cast<int32_t>(std::count(x_.begin(), x_.end(), mask_id_));
  if (step_ >= steps_ - 1) return masks;
  const float t = ts_[static_cast<size_t>(step_)], s = ts_[static_cast<size_t>(step_ + 1)];
  const float ratio = 1.0f - s / t;
  return static_cast<int32_t>(static_cast<float>(masks) * ratio);  // int() truncation
}

void DreamSchedule::apply(const std::vector<int32_t>& positions,
                          const std::vector<int32_t>& tokens) {
  for (size_t i = 0; i < positions.size(); ++i) x_[static_cast<size_t>(positions[i])] = tokens[i];
  ++step_;
}

}  // namespace dllm
