#include "backend/dllm_cache_rows.h"

#include <algorithm>
#include <numeric>

namespace dllm {

ReuseRows reuse_rows(const DllmCacheStep& dc, int64_t rows, bool first, int64_t layer) {
  ReuseRows r;
  const int32_t p_len = dc.prompt_length;
  const bool prompt = first || dc.refresh_prompt || layer == 0;
  const bool response = first || dc.refresh_response || layer == 0;
  if (prompt)
    for (int32_t i = 0; i < p_len; ++i) r.rows.push_back(i);
  if (response)
    for (int32_t i = p_len; i < rows; ++i) r.rows.push_back(i);
  r.by_similarity = !response && dc.rho > 0.0f;
  return r;
}

std::vector<int32_t> least_similar_rows(std::span<const double> sim, double rho,
                                        int32_t first_row) {
  std::vector<int32_t> order(sim.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return sim[static_cast<size_t>(a)] < sim[static_cast<size_t>(b)];
  });
  order.resize(static_cast<size_t>(static_cast<double>(sim.size()) * rho));
  std::sort(order.begin(), order.end());
  for (int32_t& g : order) g += first_row;
  return order;
}

}  // namespace dllm
