#include "decode/d2cache_selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace dllm::d2cache {

std::vector<double> certainty_density(const std::vector<bool>& known, double sigma) {
  const int64_t g = static_cast<int64_t>(known.size());
  std::vector<double> out(static_cast<size_t>(g), 1.0);
  if (!(sigma > 0) || g == 0) return out;
  const double inv = 1.0 / (2.0 * sigma * sigma);
  // phi(d) for |d| <= 2g, tabulated once: the sums below take g x 3g terms, and an exp per term
  // cost ~2 ms per call at g = 256 (twice per d2Cache step). The values are the same.
  std::vector<double> table(static_cast<size_t>(4 * g + 1));
  for (int64_t d = -2 * g; d <= 2 * g; ++d)
    table[static_cast<size_t>(d + 2 * g)] = std::exp(-static_cast<double>(d * d) * inv);
  auto phi = [&](int64_t d) {
    return d >= -2 * g && d <= 2 * g ? table[static_cast<size_t>(d + 2 * g)]
                                     : std::exp(-static_cast<double>(d * d) * inv);
  };
  double z = 0;
  for (int64_t d = -3 * g; d < 3 * g; ++d) z += phi(d);
  const double right = known.back() ? 1.0 : 0.0;
  for (int64_t i = 0; i < g; ++i) {
    double s = 0;
    for (int64_t j = -g; j < 2 * g; ++j) {
      const double k = j < 0 ? 1.0 : j >= g ? right : (known[static_cast<size_t>(j)] ? 1.0 : 0.0);
      s += phi(i - j) * k;
    }
    out[static_cast<size_t>(i)] = s / z;
  }
  return out;
}

namespace {

void check_rows(std::span<const float> rows, int64_t layers, size_t n, int64_t width) {
  if (rows.size() != static_cast<size_t>(layers) * n * static_cast<size_t>(width))
    fail("d2cache rollout: ", rows.size(), " attention values for ", layers, " layers x ", n,
         " rows x ", width, " columns");
}

}  // namespace

std::vector<double> rollout_importance(std::span<const float> attention_rows, int64_t layers,
                                       std::span<const int32_t> query_positions, int64_t width) {
  const size_t n = query_positions.size();
  check_rows(attention_rows, layers, n, width);
  std::vector<double> v(static_cast<size_t>(width), 1.0), next(v.size());
  for (int64_t l = layers - 1; l >= 0; --l) {
    next = v;  // unit rows carry their weight through unchanged
    for (size_t r = 0; r < n; ++r) next[static_cast<size_t>(query_positions[r])] = 0.0;
    for (size_t r = 0; r < n; ++r) {
      const int32_t i = query_positions[r];
      const float* a = attention_rows.data() + (static_cast<size_t>(l) * n + r) * width;
      // Four partial sums: one dependent chain of `width` double adds per row was most of the
      // host time of a d2Cache step (32 layers x ~100 rows x 768 columns).
      double part[4] = {0, 0, 0, 0};
      int64_t j = 0;
      for (; j + 4 <= width; j += 4)
        for (int u = 0; u < 4; ++u) part[u] += a[j + u];
      for (; j < width; ++j) part[0] += a[j];
      const double sum = 1.0 + ((part[0] + part[1]) + (part[2] + part[3]));  // + e_i
      const double w = v[static_cast<size_t>(i)] / sum;
      double* out = next.data();
      for (int64_t c = 0; c < width; ++c) out[c] += w * a[c];
      next[static_cast<size_t>(i)] += w;
    }
    std::swap(v, next);
  }
  return v;
}

std::vector<double> rollout_importance_dense(std::span<const float> attention_rows, int64_t layers,
                                             std::span<const int32_t> query_positions,
                                             int64_t width) {
  const size_t n = query_positions.size();
  check_rows(attention_rows, layers, n, width);
  const size_t t = static_cast<size_t>(width);
  std::vector<double> c(t * t, 0.0), w(t * t), prod(t * t);
  for (size_t i = 0; i < t; ++i) c[i * t + i] = 1.0;
  for (int64_t l = 0; l < layers; ++l) {
    std::fill(w.begin(), w.end(), 0.0);
    for (size_t i = 0; i < t; ++i) w[i * t + i] = 1.0;  // E = I
    for (size_t r = 0; r < n; ++r) {
      const size_t i = static_cast<size_t>(query_positions[r]);
      const float* a = attention_rows.data() + (static_cast<size_t>(l) * n + r) * t;
      for (size_t j = 0; j < t; ++j) w[i * t + j] = a[j];
    }
    for (size_t i = 0; i < t; ++i) {  // W = (E + I) / rowsum
      w[i * t + i] += 1.0;
      double s = 0;
      for (size_t j = 0; j < t; ++j) s += w[i * t + j];
      for (size_t j = 0; j < t; ++j) w[i * t + j] /= s;
    }
    for (size_t i = 0; i < t; ++i)  // C = W C
      for (size_t j = 0; j < t; ++j) {
        double s = 0;
        for (size_t k = 0; k < t; ++k) s += w[i * t + k] * c[k * t + j];
        prod[i * t + j] = s;
      }
    std::swap(c, prod);
  }
  std::vector<double> out(t, 0.0);
  for (size_t i = 0; i < t; ++i)
    for (size_t j = 0; j < t; ++j) out[j] += c[i * t + j];
  return out;
}

std::vector<bool> nucleus_select(const std::vector<double>& scores, double p,
                                 const std::vector<bool>& allowed) {
  const size_t n = scores.size();
  std::vector<double> s(n);
  double total = 1e-9;
  for (size_t i = 0; i < n; ++i) {
    s[i] = allowed[i] ? scores[i] : 0.0;
    total += s[i];
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return s[a] / total > s[b] / total; });
  std::vector<bool> out(n, false);
  double cum = 0;
  for (size_t rank = 0; rank < n; ++rank) {
    const size_t i = order[rank];
    cum += s[i] / total;
    if ((cum <= p || rank < 1) && allowed[i]) out[i] = true;
  }
  return out;
}

void inflate(std::vector<bool>& selected, int32_t w) {
  if (w <= 0) return;
  const int64_t t = static_cast<int64_t>(selected.size());
  std::vector<int64_t> prev(static_cast<size_t>(t), -1), next(static_cast<size_t>(t), t);
  int64_t last = -1;
  for (int64_t i = 0; i < t; ++i) {
    if (selected[static_cast<size_t>(i)]) last = i;
    prev[static_cast<size_t>(i)] = last;
  }
  last = t;
  for (int64_t i = t - 1; i >= 0; --i) {
    if (selected[static_cast<size_t>(i)]) last = i;
    next[static_cast<size_t>(i)] = last;
  }
  std::vector<bool> out = selected;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t a = prev[static_cast<size_t>(i)], b = next[static_cast<size_t>(i)];
    if (!selected[static_cast<size_t>(i)] && a >= 0 && b < t && b - a <= w)
      out[static_cast<size_t>(i)] = true;
  }
  selected = std::move(out);
}

}  // namespace dllm::d2cache
