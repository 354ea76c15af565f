// The CPU backend's FFNs: a SwiGLU FFN, and LLaDA2.x's mixture of experts built from it — route
// every row (backend/moe_routing.h), run each expert held once over the rows routed to it (an
// expert-parallel rank holds a share: the others' rows are theirs), add the weighted outputs, then
// the shared experts over every row.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/moe_routing.h"

namespace dllm::cpu_backend {

void swiglu_ffn(const CpuFfn& w, const float* x, int64_t rows, int64_t hidden, float* out,
                std::vector<float>& gate, std::vector<float>& up) {
  const int64_t inter = w.gate.rows;
  gate.resize(static_cast<size_t>(rows * inter));
  up.resize(gate.size());
  cpu::matmul_nt(x, hidden, w.gate, gate.data(), inter, rows);
  cpu::matmul_nt(x, hidden, w.up, up.data(), inter, rows);
  cpu::silu_mul(gate.data(), up.data(), gate.data(), rows * inter);
  cpu::matmul_nt(gate.data(), inter, w.down, out, hidden, rows);
}

int64_t moe_ffn(const MoeConfig& config, const CpuMoe& weights, const float* xn, int64_t m,
                int64_t hidden, float* out, MoeRoutingReport* report) {
  const int64_t n = config.num_experts, k = config.experts_per_token;
  std::vector<float> logits(static_cast<size_t>(m * n));  // the router runs in fp32 (§8.6)
  cpu::matmul_nt(xn, hidden, weights.router, logits.data(), n, m);
  const MoeRouting routing = route_experts(config, logits, m, weights.expert_bias.data);
  if (report)
    for (int64_t t = 0; t < m; ++t)
      report->add_token(
          config, std::span(logits).subspan(static_cast<size_t>(t * n), static_cast<size_t>(n)),
          weights.expert_bias.data, &routing.experts[static_cast<size_t>(t * k)]);

  // Rows routed to each expert, in row order, with their weights.
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(n));
  std::vector<std::vector<float>> row_weights(static_cast<size_t>(n));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const size_t at = static_cast<size_t>(t * k + j);
      rows[static_cast<size_t>(routing.experts[at])].push_back(t);
      row_weights[static_cast<size_t>(routing.experts[at])].push_back(routing.weights[at]);
    }

  // Each row sums its experts in expert-index order, whatever else is in the batch.
  std::fill(out, out + m * hidden, 0.0f);
  std::vector<float> x, y, gate, up;
  const int64_t first = config.first_held_expert;
  int64_t used = 0;
  for (int64_t e = first; e < first + config.held_count(); ++e) {
    const auto& r = rows[static_cast<size_t>(e)];
    if (r.empty()) continue;  // only the experts some row chose are computed
    ++used;
    const int64_t count = static_cast<int64_t>(r.size());
    x.resize(static_cast<size_t>(count * hidden));
    y.resize(x.size());
    for (int64_t i = 0; i < count; ++i)
      std::copy_n(xn + r[static_cast<size_t>(i)] * hidden, hidden,
                  &x[static_cast<size_t>(i * hidden)]);
    swiglu_ffn(weights.experts[static_cast<size_t>(e - first)], x.data(), count, hidden, y.data(),
               gate, up);
    for (int64_t i = 0; i < count; ++i) {
      const float w = row_weights[static_cast<size_t>(e)][static_cast<size_t>(i)];
      float* o = out + r[static_cast<size_t>(i)] * hidden;
      const float* yi = &y[static_cast<size_t>(i * hidden)];
      for (int64_t d = 0; d < hidden; ++d) o[d] += w * yi[d];
    }
  }
  if (!weights.shared.gate.empty()) {
    y.resize(static_cast<size_t>(m * hidden));
    swiglu_ffn(weights.shared, xn, m, hidden, y.data(), gate, up);
    for (int64_t i = 0; i < m * hidden; ++i) out[i] += y[static_cast<size_t>(i)];
  }
  return used;
}

}  // namespace dllm::cpu_backend
