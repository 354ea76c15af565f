#include "decode/token_editing_rule.h"

namespace dllm {

std::vector<size_t> mask_fills(std::span<const int32_t> current, std::span<const TokenStats> stats,
                               int32_t mask_id, float threshold) {
  std::vector<size_t> fill;
  size_t best = current.size();
  for (size_t r = 0; r < current.size(); ++r) {
    if (current[r] != mask_id) continue;
    const float p = stats[r].p_token;
    if (p > threshold) fill.push_back(r);
    if (best == current.size() || p > stats[best].p_token) best = r;
  }
  if (fill.empty() && best < current.size()) fill.push_back(best);
  return fill;
}

std::vector<size_t> token_edits(std::span<const int32_t> current, std::span<const TokenStats> stats,
                                int32_t mask_id, float editing_threshold) {
  std::vector<size_t> edit;
  for (size_t r = 0; r < current.size(); ++r)
    if (current[r] != mask_id && stats[r].p_token > editing_threshold &&
        stats[r].token != current[r])
      edit.push_back(r);
  return edit;
}

}  // namespace dllm
