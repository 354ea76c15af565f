// dLLM-Cache (method-specs §6.3) as an option of the CPU forward: the queries are the whole
// canvas. The first forward computes everything and keeps, per layer, K/V (in the cache) and the
// attention (after o_proj) and FFN outputs of every row (in the sequence's method state). A later
// forward keeps every row's hidden state as residual + kept outputs and recomputes per layer only
// the rows of backend/dllm_cache_rows.h — with value similarity, after writing the new V of every
// response row to the cache.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/dllm_cache_rows.h"

namespace dllm::cpu_backend {
namespace {

CpuMethodState& state_of(const SequenceRun& run) {
  return static_cast<CpuMethodState&>(*run.seq->state);
}

// torch cosine_similarity: x.y / max(|x| |y|, eps), eps = 1e-8, in double.
double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::max(std::sqrt(aa) * std::sqrt(bb), 1e-8);
}

}  // namespace

void CpuBackend::reuse_select_rows(int64_t layer, SequenceRun& run, const float* x) {
  const ModelConfig& c = config_;
  const DllmCacheStep& dc = *run.seq->dllm_cache;
  const int64_t n = run.rows, p_len = dc.prompt_length, g_len = n - p_len;
  const int64_t h = c.hidden_size, kvd = c.kv_dim();
  if (run.reuse_first && layer == 0) {
    CpuMethodState& st = state_of(run);
    st.attn_out.assign(static_cast<size_t>(c.num_layers), std::vector<float>(size_t(n * h)));
    st.ffn_out.assign(static_cast<size_t>(c.num_layers), std::vector<float>(size_t(n * h)));
  }
  ReuseRows chosen = reuse_rows(dc, n, run.reuse_first, layer);
  run.active = std::move(chosen.rows);
  if (!chosen.by_similarity) return;
  // V of every response row (written to the cache); refresh the least similar ones.
  const CpuLayer& L = layers_[static_cast<size_t>(layer)];
  std::vector<float> xn(static_cast<size_t>(g_len * h)), vr(static_cast<size_t>(g_len * kvd));
  cpu::rms_norm(x + (run.row_offset + p_len) * h, h, L.attn_norm.ptr(), xn.data(), h, g_len, h,
                static_cast<float>(c.norm_eps));
  project_qkv(L, xn.data(), g_len, {}, nullptr, nullptr, vr.data());
  std::vector<double> sim(static_cast<size_t>(g_len));
  for (int64_t g = 0; g < g_len; ++g) {
    float* cached = v_row(layer, run.cache->physical_slot(p_len + g));
    sim[static_cast<size_t>(g)] = cosine(&vr[static_cast<size_t>(g * kvd)], cached, kvd);
    std::copy_n(&vr[static_cast<size_t>(g * kvd)], kvd, cached);
  }
  for (int32_t r : least_similar_rows(sim, dc.rho, static_cast<int32_t>(p_len)))
    run.active.push_back(r);
}

void CpuBackend::reuse_store_and_add(int64_t layer, SequenceRun& run, const float* out, bool ffn,
                                     float* x) const {
  const int64_t h = config_.hidden_size;
  CpuMethodState& st = state_of(run);
  std::vector<float>& kept = (ffn ? st.ffn_out : st.attn_out)[static_cast<size_t>(layer)];
  for (size_t i = 0; i < run.active.size(); ++i)
    std::copy_n(out + static_cast<int64_t>(i) * h, h, &kept[static_cast<size_t>(run.active[i] * h)]);
  float* xs = x + run.row_offset * h;
  for (size_t i = 0; i < static_cast<size_t>(run.rows * h); ++i) xs[i] += kept[i];
}

void CpuBackend::reuse_finish(SequenceRun& run) const {
  if (!run.reuse_first) return;
  for (int64_t s = 0; s < run.rows; ++s) run.cache->set_position(s, static_cast<int32_t>(s));
  run.cache->set_length(run.rows);
}

}  // namespace dllm::cpu_backend
