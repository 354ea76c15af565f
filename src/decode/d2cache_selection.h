// d²Cache's token-selection arithmetic (method-specs §4.3-4.5), as pure functions on host
// arrays so each can be tested on its own: certainty density, attention rollout importance
// (exact reverse-vector form and the dense product it replaces), nucleus selection, inflation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dllm::d2cache {

// Certainty density over the generation region (method-specs §4.4, d2Cache common.py):
// D(i) = sum_{j in [-G, 2G)} phi(i - j) known_j / Z with phi(x) = exp(-x^2 / 2 sigma^2); the
// region is padded with 1 on the left (the prompt) and with known[G-1] on the right; Z is the
// whole kernel sum over [-3G, 3G), the normaliser of the reference's circular convolution.
// sigma <= 0: all ones (certainty prior off).
std::vector<double> certainty_density(const std::vector<bool>& known, double sigma);

// Rollout importance c_j = sum_i C[i, j] with C = W_L ... W_1 (layer 1 first), where W_l has
// unit rows e_i for tokens that were not queries of layer l and (a_i + e_i) / (sum(a_i) + 1)
// for query row i with head-averaged attention a_i. Computed exactly as c^T = 1^T W_L ... W_1,
// a vector pass from the last layer to the first that touches only the query rows: O(L |Q| T)
// instead of O(L T^3) (method-specs §4.5).
//   attention_rows: [L, |Q|, width] (SequenceResult::attention_rows), row r of layer l is the
//   attention of canvas position query_positions[r]; columns are canvas positions.
std::vector<double> rollout_importance(std::span<const float> attention_rows, int64_t layers,
                                       std::span<const int32_t> query_positions, int64_t width);

// The same by dense T x T matrix products, as the reference computes it (tests only).
std::vector<double> rollout_importance_dense(std::span<const float> attention_rows, int64_t layers,
                                             std::span<const int32_t> query_positions,
                                             int64_t width);

// d2Cache common.py nucleus_select with min_k = 1: scores of allowed tokens normalised by their
// sum (+1e-9), sorted descending (ties: lower index first); keeps a token while the cumulative
// sum is <= p, always the first in the order, never a token that is not allowed.
std::vector<bool> nucleus_select(const std::vector<double>& scores, double p,
                                 const std::vector<bool>& allowed);

// Fills every unselected gap between two selected tokens whose span (next - previous) is at
// most w (d2cache.py inflate_w).
void inflate(std::vector<bool>& selected, int32_t w);

}  // namespace dllm::d2cache
