// Internals the sparse prefill pattern builders share (sparse_prefill_patterns.cpp: text and
// vision patterns; sparse_prefill_boundary.cpp: the Q- and 2D-boundary forms). Not an API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/sparse_prefill_patterns.h"

namespace dllm::sparse_detail {

int32_t limit_of(const PrefillLayout& layout, int32_t row);
float dot(const float* a, const float* b, int d);
// Softmax rows of queries [q_begin, q_end) over keys [0, key_end) (default q_end) under the
// family rule, fp32 ([rows][key_end], row-major): what every online estimate starts from.
std::vector<float> last_query_attention(const HeadQK& qk, const PrefillLayout& layout,
                                        int32_t q_begin, int32_t q_end, int32_t key_end = -1);
// Indices of the k largest values, ties to the lower index (a stable order).
std::vector<int32_t> top_k(const std::vector<float>& v, int32_t k);
// The diagonal-block rule: keys [covered_end, limit(last)] that a pattern's bands left out.
void add_diagonal_block_span(SparseHeadPlan& head, const PrefillLayout& layout, int32_t covered_end,
                             int32_t last);

// Calls fn(first, last) for consecutive chunks of at most kSparseTileRows of [begin, end).
template <class Fn>
void for_each_row_chunk(int32_t begin, int32_t end, Fn fn) {
  for (int32_t r = begin; r < end; r += kSparseTileRows)
    fn(r, std::min(end, r + kSparseTileRows) - 1);
}

// The boundary forms (sparse_prefill_boundary.cpp).
void add_q_boundary_rows(SparseHeadPlan& head, const PrefillLayout& layout, const HeadQK& qk,
                         const HeadPattern& p);
void add_q_boundary_tiles(SparseHeadPlan& head, const PrefillLayout& layout,
                          const std::vector<VsIndices>& idx);
void add_2d_boundary_rows(SparseHeadPlan& head, const PrefillLayout& layout, const HeadQK& qk,
                          const HeadPattern& p);

}  // namespace dllm::sparse_detail
