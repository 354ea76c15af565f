#include "attention/sparse_attention.h"

#include <algorithm>
#include <iterator>
#include <numeric>

#include "core/error.h"

namespace dllm {

SparseMethod parse_sparse_method(const std::string& text) {
  if (text == "none") return SparseMethod::kNone;
  if (text == "mage") return SparseMethod::kMage;
  if (text == "quest") return SparseMethod::kQuest;
  if (text == "sparsed") return SparseMethod::kSparseD;
  fail("--sparse must be none, mage, quest or sparsed (got '", text, "')");
}

std::string to_string(SparseMethod method) {
  switch (method) {
    case SparseMethod::kNone:
      return "none";
    case SparseMethod::kMage:
      return "mage";
    case SparseMethod::kQuest:
      return "quest";
    case SparseMethod::kSparseD:
      return "sparsed";
  }
  return "none";
}

std::vector<int32_t> top_k_indices(std::span<const double> scores, int64_t k) {
  std::vector<int32_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0);
  if (static_cast<int64_t>(idx.size()) > k) {
    const auto greater = [&](int32_t a, int32_t b) {
      const double sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
      return sa > sb || (sa == sb && a < b);
    };
    std::nth_element(idx.begin(), idx.begin() + k, idx.end(), greater);
    idx.resize(static_cast<size_t>(k));
  }
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<int32_t> selection_query_rows(int64_t rows, int32_t select_queries) {
  std::vector<int32_t> out;
  if (select_queries <= 0 || select_queries >= rows) {
    out.resize(static_cast<size_t>(rows));
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  for (int32_t i = 0; i < select_queries; ++i)
    out.push_back(static_cast<int32_t>((2 * i + 1) * rows / (2 * select_queries)));
  return out;
}

double top_k_recall(std::span<const SparseSet> step1, std::span<const SparseSet> later) {
  if (step1.size() != later.size())
    fail("top_k_recall: ", step1.size(), " step-1 sets against ", later.size(), " later sets");
  double sum = 0;
  int64_t count = 0;
  for (size_t i = 0; i < later.size(); ++i) {
    const SparseSet& exact = later[i];
    if (exact.dense || exact.slots.empty()) continue;
    const SparseSet& s = step1[i];
    int64_t hit = 0;
    if (s.dense) {
      hit = static_cast<int64_t>(exact.slots.size());
    } else {
      std::vector<int32_t> common;
      std::set_intersection(s.slots.begin(), s.slots.end(), exact.slots.begin(), exact.slots.end(),
                            std::back_inserter(common));
      hit = static_cast<int64_t>(common.size());
    }
    sum += static_cast<double>(hit) / static_cast<double>(exact.slots.size());
    ++count;
  }
  return count ? sum / static_cast<double>(count) : -1.0;
}

}  // namespace dllm
