#include "backend/cpu/sparse_select.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_ops.h"

namespace dllm::cpu {
namespace {

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace

std::vector<double> mean_attention_scores(const float* q, int64_t q_stride,
                                          std::span<const int32_t> rows, int64_t group,
                                          int64_t head_dim, std::span<const float* const> keys,
                                          int64_t n_prefix, int64_t n_norm,
                                          std::span<const uint8_t> visible, int64_t visible_stride,
                                          float scale) {
  std::vector<double> acc(static_cast<size_t>(n_prefix), 0.0);
  std::vector<double> s(static_cast<size_t>(n_norm));
  const double weight = 1.0 / static_cast<double>(rows.size() * static_cast<size_t>(group));
  for (int32_t r : rows) {
    const uint8_t* vis = visible.empty() ? nullptr : visible.data() + r * visible_stride;
    for (int64_t g = 0; g < group; ++g) {
      const float* qr = q + r * q_stride + g * head_dim;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n_norm; ++j) {
        const bool seen = !vis || vis[j];
        s[static_cast<size_t>(j)] = seen ? dot(qr, keys[static_cast<size_t>(j)], head_dim) * scale
                                         : -std::numeric_limits<double>::infinity();
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      if (mx == -std::numeric_limits<double>::infinity()) continue;  // sees nothing
      double z = 0;
      for (int64_t j = 0; j < n_norm; ++j) z += std::exp(s[static_cast<size_t>(j)] - mx);
      for (int64_t j = 0; j < n_prefix; ++j)
        acc[static_cast<size_t>(j)] += std::exp(s[static_cast<size_t>(j)] - mx) / z * weight;
    }
  }
  return acc;
}

std::vector<double> quest_page_scores(const float* q, int64_t q_stride,
                                      std::span<const int32_t> rows, int64_t group,
                                      int64_t head_dim, std::span<const float* const> keys,
                                      int64_t n_prefix, int64_t page_size) {
  const int64_t pages = (n_prefix + page_size - 1) / page_size;
  std::vector<double> out(static_cast<size_t>(pages), 0.0);
  std::vector<float> mx(static_cast<size_t>(head_dim)), mn(static_cast<size_t>(head_dim));
  const double weight = 1.0 / static_cast<double>(rows.size() * static_cast<size_t>(group));
  for (int64_t p = 0; p < pages; ++p) {
    std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
    std::fill(mn.begin(), mn.end(), std::numeric_limits<float>::infinity());
    for (int64_t j = p * page_size; j < std::min(n_prefix, (p + 1) * page_size); ++j)
      for (int64_t d = 0; d < head_dim; ++d) {
        const float kv = keys[static_cast<size_t>(j)][d];
        mx[static_cast<size_t>(d)] = std::max(mx[static_cast<size_t>(d)], kv);
        mn[static_cast<size_t>(d)] = std::min(mn[static_cast<size_t>(d)], kv);
      }
    double total = 0;
    for (int32_t r : rows)
      for (int64_t g = 0; g < group; ++g) {
        const float* qr = q + r * q_stride + g * head_dim;
        double u = 0;
        for (int64_t d = 0; d < head_dim; ++d) {
          const double a = static_cast<double>(qr[d]) * mx[static_cast<size_t>(d)];
          const double b = static_cast<double>(qr[d]) * mn[static_cast<size_t>(d)];
          u += std::max(a, b);
        }
        total += u;
      }
    out[static_cast<size_t>(p)] = total * weight;
  }
  return out;
}

std::vector<int32_t> page_slots(std::span<const int32_t> pages, int64_t page_size,
                                int64_t n_prefix) {
  std::vector<int32_t> out;
  for (int32_t p : pages)
    for (int64_t j = p * page_size; j < std::min(n_prefix, (p + 1) * page_size); ++j)
      out.push_back(static_cast<int32_t>(j));
  return out;
}

std::vector<int64_t> sparse_key_columns(const SparseSet& set, int64_t n_keys) {
  std::vector<int64_t> cols;
  if (set.dense) {
    for (int64_t j = 0; j < set.prefix; ++j) cols.push_back(j);
  } else {
    cols.assign(set.slots.begin(), set.slots.end());
  }
  for (int64_t j = set.prefix; j < n_keys; ++j) cols.push_back(j);
  return cols;
}

void gathered_attention(const float* q, int64_t q_stride, std::span<const float* const> k_rows,
                        std::span<const float* const> v_rows, std::span<const uint8_t> visible,
                        std::span<const int64_t> cols, float* out, int64_t out_stride, int64_t n_q,
                        int64_t group, int64_t head_dim, float scale) {
  const int64_t n_keys = static_cast<int64_t>(k_rows.size());
  const int64_t n_cols = static_cast<int64_t>(cols.size());
  std::vector<const float*> kr(cols.size()), vr(cols.size());
  std::vector<uint8_t> vis(static_cast<size_t>(n_q * n_cols));
  for (int64_t ci = 0; ci < n_cols; ++ci) {
    const int64_t col = cols[static_cast<size_t>(ci)];
    kr[static_cast<size_t>(ci)] = k_rows[static_cast<size_t>(col)];
    vr[static_cast<size_t>(ci)] = v_rows[static_cast<size_t>(col)];
    for (int64_t i = 0; i < n_q; ++i)
      vis[static_cast<size_t>(i * n_cols + ci)] = visible[static_cast<size_t>(i * n_keys + col)];
  }
  attention(q, q_stride, kr, vr, vis, out, out_stride, n_q, group, 1, head_dim, scale);
}

}  // namespace dllm::cpu
