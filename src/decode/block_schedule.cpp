#include "decode/block_schedule.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace dllm {

std::vector<int32_t> aligned_block_canvas(const std::vector<int32_t>& prompt, int32_t max_tokens,
                                          int32_t block_length, int32_t mask_id) {
  const int64_t len = static_cast<int64_t>(prompt.size()) + max_tokens;
  const int64_t blocks = (len + block_length - 1) / block_length;
  std::vector<int32_t> canvas(static_cast<size_t>(blocks * block_length), mask_id);
  std::copy(prompt.begin(), prompt.end(), canvas.begin());
  return canvas;
}

bool aligned_block_has_mask(const std::vector<int32_t>& canvas, int32_t block, int32_t block_length,
                            int32_t mask_id) {
  const auto begin = canvas.begin() + static_cast<int64_t>(block) * block_length;
  return std::find(begin, begin + block_length, mask_id) != begin + block_length;
}

std::vector<int32_t> transfer_schedule(int32_t block_length, int32_t steps) {
  std::vector<int32_t> n(static_cast<size_t>(steps), block_length / steps);
  for (int32_t i = 0; i < block_length % steps; ++i) ++n[static_cast<size_t>(i)];
  return n;
}

std::vector<int32_t> select_unmask(const std::string& rule, const std::vector<float>& confidence,
                                   const std::vector<bool>& masked, int32_t k, float threshold) {
  std::vector<int32_t> masks;
  for (size_t i = 0; i < masked.size(); ++i)
    if (masked[i]) masks.push_back(static_cast<int32_t>(i));
  k = std::min<int32_t>(k, static_cast<int32_t>(masks.size()));
  if (rule == "sequential") return {masks.begin(), masks.begin() + k};
  auto top_k = [&] {
    std::vector<int32_t> order = masks;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return confidence[static_cast<size_t>(a)] > confidence[static_cast<size_t>(b)];
    });
    order.resize(static_cast<size_t>(k));
    std::sort(order.begin(), order.end());
    return order;
  };
  if (rule == "low_confidence_static") return top_k();
  if (rule == "low_confidence_dynamic") {
    std::vector<int32_t> high;
    for (int32_t i : masks)
      if (confidence[static_cast<size_t>(i)] > threshold) high.push_back(i);
    if (static_cast<int32_t>(high.size()) >= k) return high;
    return top_k();
  }
  fail("unknown remasking rule '", rule,
       "' (expected low_confidence_dynamic, low_confidence_static or sequential)");
}

}  // namespace dllm
