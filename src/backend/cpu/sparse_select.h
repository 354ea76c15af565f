// The CPU's sparse-attention selection scores (method-specs §1.4, §6.1, §6.2), as plain functions
// of one KV head's queries and keys; checked against tools/reference_sparse_attention.py in
// tests/backend/sparse_attention_test.cpp. The backend glue is cpu_sparse.cpp.
//
// Every function reads the G query heads sharing one KV head: q points at the first of them in
// row 0 (head g of row r at q + r * q_stride + g * head_dim), and keys[j] at key j's head_dim
// values of that KV head. Sums run in double.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention/sparse_attention.h"

namespace dllm::cpu {

// MAGE (Eq. 3) and SparseD: a_j = mean over the given rows and the G heads of
// softmax(q · k * scale)_j, for the prefix keys j in [0, n_prefix). The softmax runs over the
// first n_norm keys (MAGE: n_prefix, the prefix only; SparseD: every key), skipping keys the row
// cannot see (visible[r * visible_stride + j] == 0; empty visible: all seen).
std::vector<double> mean_attention_scores(const float* q, int64_t q_stride,
                                          std::span<const int32_t> rows, int64_t group,
                                          int64_t head_dim, std::span<const float* const> keys,
                                          int64_t n_prefix, int64_t n_norm,
                                          std::span<const uint8_t> visible, int64_t visible_stride,
                                          float scale);

// Quest with MAGE's averaging (§6.1): per page of page_size prefix keys (the last may be
// partial), the mean over the rows and G heads of sum_d max(q_d * max_d, q_d * min_d), where
// max_d / min_d run over the page's keys.
std::vector<double> quest_page_scores(const float* q, int64_t q_stride,
                                      std::span<const int32_t> rows, int64_t group,
                                      int64_t head_dim, std::span<const float* const> keys,
                                      int64_t n_prefix, int64_t page_size);

// The slots of the given pages (ascending pages in, ascending slots out), clipped to n_prefix.
std::vector<int32_t> page_slots(std::span<const int32_t> pages, int64_t page_size,
                                int64_t n_prefix);

// The key columns one KV head attends through `set` (keys ordered [prefix | block], prefix slot j
// is column j): the selected slots (every slot below set.prefix when dense), the prefix keys
// committed after the selection, then the block's keys.
std::vector<int64_t> sparse_key_columns(const SparseSet& set, int64_t n_keys);

// Attention of n_q rows of one KV head's G query heads over the key columns `cols` only:
// cpu::attention on the gathered keys (k_rows[j] / v_rows[j]: key j of that KV head), so columns
// naming every key give exact attention bit for bit. visible: [n_q, n_keys] over all keys.
void gathered_attention(const float* q, int64_t q_stride, std::span<const float* const> k_rows,
                        std::span<const float* const> v_rows, std::span<const uint8_t> visible,
                        std::span<const int64_t> cols, float* out, int64_t out_stride, int64_t n_q,
                        int64_t group, int64_t head_dim, float scale);

}  // namespace dllm::cpu
