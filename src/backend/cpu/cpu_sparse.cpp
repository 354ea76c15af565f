// Sparse attention in the CPU forward (method-specs §1.4, §6.1, §6.2): per layer past the exact
// ones, a selector may pick each KV head's prefix slots from this forward's queries into the
// sequence's method state, and the attention may read the prefix through the stored sets — the
// block's own keys always, outside the budget. The scores are sparse_select.h's; the attention is
// cpu::attention over the gathered keys, so a set holding every prefix key gives exact attention
// bit for bit.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/sparse_select.h"
#include "core/error.h"

namespace dllm::cpu_backend {
namespace {

// A set that was never selected (a selected one is dense or has slots).
bool unselected(const SparseSet& s) {
  return !s.dense && s.slots.empty();
}

}  // namespace

void CpuBackend::check_sparse_state(const SequenceForward& seq, size_t index) const {
  if (!seq.sparse || !seq.sparse->attend_selected) return;
  const SparseStep& sp = *seq.sparse;
  if (sp.select != SparseMethod::kNone && sp.keep_selection) return;  // selects first
  if (sp.exact_layers >= config_.num_layers) return;  // every layer exact: no sets to attend
  const auto& sets = static_cast<const CpuMethodState*>(seq.state)->sparse_sets;
  const int64_t hkv = config_.num_kv_heads;
  const bool complete = static_cast<int64_t>(sets.size()) == config_.num_layers * hkv &&
                        std::none_of(sets.begin() + sp.exact_layers * hkv, sets.end(), unselected);
  if (!complete)
    fail("forward request ", index,
         ": sparse attention attends stored index sets, but no selection is stored for layers >= ",
         sp.exact_layers);
  for (const SparseSet& s : sets)
    if (s.prefix > seq.cache->length())
      fail("forward request ", index, ": the stored sparse selection covers ", s.prefix,
           " cached slots but the cache holds ", seq.cache->length());
}

SparseSet CpuBackend::select_sparse_set(const SequenceRun& run, int64_t kv_head,
                                        std::span<const float* const> krows, const float* q) const {
  const ModelConfig& c = config_;
  const SparseStep& sp = *run.seq->sparse;
  const int64_t n_k = static_cast<int64_t>(run.key_slots.size());
  const int64_t m = run.rows, n_prefix = n_k - m, group = c.num_heads / c.num_kv_heads;
  SparseSet set;
  set.prefix = n_prefix;
  if (n_prefix <= sp.k) {  // N <= k: dense, no selection (§1.5)
    set.dense = true;
    return set;
  }
  std::vector<const float*> keys(static_cast<size_t>(n_k));
  for (int64_t j = 0; j < n_k; ++j)
    keys[static_cast<size_t>(j)] = krows[static_cast<size_t>(j)] + kv_head * c.head_dim;
  const float* qh = q + kv_head * group * c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (sp.select == SparseMethod::kQuest) {
    const std::vector<int32_t> all = selection_query_rows(m, 0);
    const std::vector<double> pages =
        cpu::quest_page_scores(qh, c.q_dim(), all, group, c.head_dim, keys, n_prefix, sp.page_size);
    const std::vector<int32_t> top =
        top_k_indices(pages, std::max<int64_t>(1, sp.k / sp.page_size));
    set.slots = cpu::page_slots(top, sp.page_size, n_prefix);
    return set;
  }
  // MAGE: the prefix-only softmax of the chosen queries; SparseD: every query, every key.
  const bool mage = sp.select == SparseMethod::kMage;
  const std::vector<int32_t> rows = selection_query_rows(m, mage ? sp.select_queries : 0);
  const std::vector<double> scores =
      cpu::mean_attention_scores(qh, c.q_dim(), rows, group, c.head_dim, keys, n_prefix,
                                 mage ? n_prefix : n_k, run.visible, n_k, scale);
  set.slots = top_k_indices(scores, sp.k);
  return set;
}

void CpuBackend::attend_sparse(int64_t layer, SequenceRun& run, std::span<const float* const> krows,
                               std::span<const float* const> vrows, const float* q, float* out,
                               SequenceResult& result) const {
  const ModelConfig& c = config_;
  const SparseStep& sp = *run.seq->sparse;
  auto& sets = static_cast<CpuMethodState*>(run.seq->state)->sparse_sets;
  const int64_t hkv = c.num_kv_heads, hd = c.head_dim, group = c.num_heads / hkv;
  sets.resize(static_cast<size_t>(c.num_layers * hkv));
  if (sp.select != SparseMethod::kNone) {
    for (int64_t h = 0; h < hkv; ++h) {
      SparseSet set = select_sparse_set(run, h, krows, q);
      const size_t at = static_cast<size_t>(layer * hkv + h);
      if (sp.want_selection) result.sparse_selection[at] = set;
      if (sp.keep_selection) sets[at] = std::move(set);
    }
  }
  if (!sp.attend_selected) {
    attend_exact(layer, run, krows, vrows, q, out, result);
    return;
  }
  const int64_t n_k = static_cast<int64_t>(run.key_slots.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<const float*> kh(static_cast<size_t>(n_k)), vh(static_cast<size_t>(n_k));
  for (int64_t h = 0; h < hkv; ++h) {
    for (int64_t j = 0; j < n_k; ++j) {
      kh[static_cast<size_t>(j)] = krows[static_cast<size_t>(j)] + h * hd;
      vh[static_cast<size_t>(j)] = vrows[static_cast<size_t>(j)] + h * hd;
    }
    const std::vector<int64_t> cols =
        cpu::sparse_key_columns(sets[static_cast<size_t>(layer * hkv + h)], n_k);
    cpu::gathered_attention(q + h * group * hd, c.q_dim(), kh, vh, run.visible, cols,
                            out + h * group * hd, c.q_dim(), run.rows, group, hd, scale);
  }
}

}  // namespace dllm::cpu_backend
