// CPU backend: the reference forward. fp32 compute from bf16/f16/f32 weights (converted once at
// load), OpenBLAS GEMMs, OpenMP elementwise ops. Sequences of a batch share the GEMMs (their tokens
// are concatenated) and get their own attention.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/sequence_slots.h"
#include "core/error.h"
#include "decode/d2cache_selection.h"
#include "decode/s2d2_policy.h"
#include "decode/s2d2_verify.h"
#include "kv/host_kv_cache.h"

namespace dllm {
namespace {

struct CpuLayer {
  HostTensor attn_norm, q, k, v, o, q_bias, k_bias, v_bias, q_norm, k_norm, mlp_norm, gate, up,
      down;
};

HostTensor to_f32(const TensorEntry* t) {
  if (!t) return {};
  HostTensor out(t->shape);
  convert_to_f32(*t->dtype, t->data, out.ptr(), static_cast<size_t>(t->numel()));
  return out;
}

// Where one sequence's queries and keys live for this forward.
struct SequenceLayout {
  HostKvCache* cache = nullptr;
  std::unique_ptr<HostKvCache> owned;  // no-cache requests get a scratch cache
  std::vector<int32_t> query_slots;    // where each query's fresh K/V is written
  std::vector<int32_t> key_slots;      // [visible cache entries | queries]
  std::vector<uint8_t> visible;        // [n_q, n_k]
  int64_t row_offset = 0;              // first row of this sequence in the batch
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const Model& model) : config_(model.config()) {
    const ModelTensors& t = model.tensors();
    embed_ = to_f32(t.embed);
    final_norm_ = to_f32(t.final_norm);
    tied_ = t.lm_head == t.embed;
    if (!tied_) lm_head_ = to_f32(t.lm_head);
    for (const LayerTensors& l : t.layers) {
      layers_.push_back(CpuLayer{to_f32(l.attn_norm), to_f32(l.q), to_f32(l.k), to_f32(l.v),
                                 to_f32(l.o), to_f32(l.q_bias), to_f32(l.k_bias), to_f32(l.v_bias),
                                 to_f32(l.q_norm), to_f32(l.k_norm), to_f32(l.mlp_norm),
                                 to_f32(l.gate), to_f32(l.up), to_f32(l.down)});
    }
    inv_freq_ = cpu::rope_inv_freq(config_.rope_theta, config_.rotary_dim);
  }

  std::string name() const override { return "cpu"; }

  std::unique_ptr<KvCache> create_cache(int64_t capacity) override {
    return std::make_unique<HostKvCache>(config_.num_layers, config_.kv_dim(), capacity);
  }

  std::vector<SequenceResult> forward(std::span<const SequenceForward> batch) override;

  void fill_cache_random(KvCache& kv, int64_t n, uint64_t seed) override {
    auto* cache = dynamic_cast<HostKvCache*>(&kv);
    if (!cache) fail("fill_cache_random: the cache was not created by the CPU backend");
    cache->reserve(n);
    uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t l = 0; l < config_.num_layers; ++l)
      for (int64_t s = 0; s < n; ++s)
        for (float* row : {cache->k(l, s), cache->v(l, s)})
          for (int64_t d = 0; d < config_.kv_dim(); ++d) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            row[d] = static_cast<float>(static_cast<int32_t>(state >> 33)) / 2147483648.0f;
          }
    for (int64_t s = 0; s < n; ++s) cache->set_position(s, static_cast<int32_t>(s));
    cache->set_length(n);
  }

 private:
  SequenceLayout plan_layout(const SequenceForward& seq, size_t index);
  // Final norm, LM head and TokenStats of seq's output rows; x = its first hidden row.
  void compute_outputs(const SequenceForward& seq, const float* x, SequenceResult& result) const;
  // Q/K/V projections (+ bias, q/k-norm, RoPE at `positions`) of `rows` normed rows; null
  // outputs are skipped (V needs no positions).
  void project_qkv(const CpuLayer& L, const float* xn, int64_t rows,
                   std::span<const int32_t> positions, float* q, float* k, float* v) const;
  SequenceResult forward_dllm_cache(const SequenceForward& seq);

  ModelConfig config_;
  HostTensor embed_, final_norm_, lm_head_;
  bool tied_ = false;
  std::vector<CpuLayer> layers_;
  std::vector<float> inv_freq_;
};

SequenceLayout CpuBackend::plan_layout(const SequenceForward& seq, size_t index) {
  const std::string where = "forward request " + std::to_string(index) + ": ";
  const int64_t n = static_cast<int64_t>(seq.tokens.size());
  SequenceLayout lay;
  if (seq.cache) {
    lay.cache = dynamic_cast<HostKvCache*>(seq.cache);
    if (!lay.cache) fail(where, "the cache was not created by the CPU backend");
  } else {
    lay.owned = std::make_unique<HostKvCache>(config_.num_layers, config_.kv_dim(), n);
    lay.cache = lay.owned.get();
  }
  HostKvCache& cache = *lay.cache;

  const SequenceSlots slots = plan_sequence_slots(seq, seq.cache ? &cache : nullptr, index);
  cache.reserve(slots.needed_capacity);
  lay.query_slots = slots.query_slots;
  const std::vector<int32_t>& visible_slots = slots.visible_slots;

  std::vector<int32_t> cache_positions;
  for (int32_t s : visible_slots)
    cache_positions.push_back(cache.positions()[static_cast<size_t>(s)]);
  build_visibility(seq.rule, cache_positions, seq.positions, lay.visible);
  lay.key_slots = visible_slots;
  lay.key_slots.insert(lay.key_slots.end(), lay.query_slots.begin(), lay.query_slots.end());
  return lay;
}

void CpuBackend::compute_outputs(const SequenceForward& seq, const float* x,
                                 SequenceResult& result) const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  const float eps = static_cast<float>(c.norm_eps);
  const HostTensor& head = tied_ ? embed_ : lm_head_;
  const int64_t m = static_cast<int64_t>(seq.output_rows.size());
  if (m == 0 || !(seq.want_logits || seq.want_stats || seq.retain_logits || seq.verify)) return;
  std::vector<float> rows(static_cast<size_t>(m * h));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = seq.output_rows[static_cast<size_t>(i)];
    cpu::rms_norm(&x[static_cast<size_t>(r * h)], h, final_norm_.ptr(),
                  &rows[static_cast<size_t>(i * h)], h, 1, h, eps);
  }
  std::vector<float>& logits = result.logits;
  logits.resize(static_cast<size_t>(m * c.vocab_size));
  cpu::matmul_nt(rows.data(), h, head.ptr(), h, logits.data(), c.vocab_size, m, c.vocab_size, h);
  if (seq.want_stats) {
    auto& stats = result.stats;
    stats.resize(static_cast<size_t>(m));
#pragma omp parallel for if (m > 1 && \
                             m * c.vocab_size >= (1 << 16))  // tiny vocabularies: one thread
    for (int64_t i = 0; i < m; ++i) {
      const size_t row = static_cast<size_t>(seq.output_rows[static_cast<size_t>(i)]);
      const int32_t pos = seq.rng_positions.empty() ? seq.positions[row]
                                                    : seq.rng_positions[static_cast<size_t>(i)];
      const auto row_logits = std::span<const float>(logits).subspan(
          static_cast<size_t>(i * c.vocab_size), static_cast<size_t>(c.vocab_size));
      stats[static_cast<size_t>(i)] = compute_token_stats(row_logits, seq.sampler, seq.rng, pos);
    }
  }
  if (seq.want_span_stats)
    result.span_stats = span_stats_on_host(seq, logits, result.stats, c.vocab_size);
  if (seq.retain_logits || seq.verify) {
    auto* cache = dynamic_cast<HostKvCache*>(seq.cache);
    if (!cache) fail("retain_logits / verify: the cache was not created by the CPU backend");
    if (seq.verify)
      result.verify_rows =
          verify_span_rows(logits, cache->kept_logits, c.vocab_size, *seq.verify, seq.sampler);
    if (seq.retain_logits) cache->kept_logits = logits;
  }
  if (!seq.want_logits) logits.clear();
}

void CpuBackend::project_qkv(const CpuLayer& L, const float* xn, int64_t rows,
                             std::span<const int32_t> positions, float* q, float* k,
                             float* v) const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const float eps = static_cast<float>(c.norm_eps);
  if (q) cpu::matmul_nt(xn, h, L.q.ptr(), h, q, qd, rows, qd, h);
  if (k) cpu::matmul_nt(xn, h, L.k.ptr(), h, k, kvd, rows, kvd, h);
  if (v) cpu::matmul_nt(xn, h, L.v.ptr(), h, v, kvd, rows, kvd, h);
  if (c.qkv_bias) {
    for (int64_t r = 0; r < rows; ++r) {
      if (q)
        for (int64_t i = 0; i < qd; ++i) q[r * qd + i] += L.q_bias.data[static_cast<size_t>(i)];
      for (int64_t i = 0; i < kvd; ++i) {
        if (k) k[r * kvd + i] += L.k_bias.data[static_cast<size_t>(i)];
        if (v) v[r * kvd + i] += L.v_bias.data[static_cast<size_t>(i)];
      }
    }
  }
  if (c.qk_norm) {
    if (q) cpu::rms_norm(q, hd, L.q_norm.ptr(), q, hd, rows * c.num_heads, hd, eps);
    if (k) cpu::rms_norm(k, hd, L.k_norm.ptr(), k, hd, rows * c.num_kv_heads, hd, eps);
  }
  if (q) cpu::rope_neox(q, qd, rows, c.num_heads, hd, c.rotary_dim, positions, inv_freq_);
  if (k) cpu::rope_neox(k, kvd, rows, c.num_kv_heads, hd, c.rotary_dim, positions, inv_freq_);
}

// dLLM-Cache (method-specs §6.3, the d2Cache repository's port src/cache/dllm_cache.py): the
// queries are the whole canvas. The first forward computes everything and caches, per layer,
// K/V and the attention (after o_proj) and FFN outputs of every row. A later forward keeps
// every row's hidden state as residual + cached outputs and recomputes per layer only
//   the prompt rows when refresh_prompt, the response rows when refresh_response (layer 0
//   always both: its input is the embedding of the current tokens);
//   otherwise, with rho > 0, V of every response row (written to the cache) and Q/K,
//   attention and FFN of the int(G * rho) response rows whose new V is least cosine-similar to
//   the cached one (ties: lower position).
SequenceResult CpuBackend::forward_dllm_cache(const SequenceForward& seq) {
  const ModelConfig& c = config_;
  const DllmCacheStep& dc = *seq.dllm_cache;
  auto* cache = dynamic_cast<HostKvCache*>(seq.cache);
  if (!cache) fail("forward request 0: dLLM-Cache needs a cache created by the CPU backend");
  // Request shape (prompt length, positions, write, canvas vs cache): validate_forward.
  const int64_t n = static_cast<int64_t>(seq.tokens.size());
  const int64_t p_len = dc.prompt_length, g_len = n - p_len;
  const bool first = cache->length() == 0;
  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), inter = c.intermediate_size;
  const float eps = static_cast<float>(c.norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (first) {
    cache->reserve(n);
    cache->attn_out.assign(static_cast<size_t>(c.num_layers), std::vector<float>(size_t(n * h)));
    cache->ffn_out.assign(static_cast<size_t>(c.num_layers), std::vector<float>(size_t(n * h)));
  }

  std::vector<float> x(static_cast<size_t>(n * h)), xn(x.size());
  for (int64_t r = 0; r < n; ++r)
    std::copy_n(embed_.ptr() + static_cast<int64_t>(seq.tokens[static_cast<size_t>(r)]) * h, h,
                &x[static_cast<size_t>(r * h)]);
  std::vector<uint8_t> visible;
  std::vector<const float*> krows(static_cast<size_t>(n)), vrows(static_cast<size_t>(n));
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const CpuLayer& L = layers_[static_cast<size_t>(li)];
    const bool rp = first || dc.refresh_prompt || li == 0;
    const bool rr = first || dc.refresh_response || li == 0;
    cpu::rms_norm(x.data(), h, L.attn_norm.ptr(), xn.data(), h, n, h, eps);
    std::vector<int32_t> rows;
    if (rp)
      for (int32_t r = 0; r < p_len; ++r) rows.push_back(r);
    if (rr) {
      for (int32_t r = static_cast<int32_t>(p_len); r < n; ++r) rows.push_back(r);
    } else if (dc.rho > 0.0f) {
      // V of every response row; refresh the least similar ones.
      std::vector<float> vr(static_cast<size_t>(g_len * kvd));
      project_qkv(L, &xn[static_cast<size_t>(p_len * h)], g_len, {}, nullptr, nullptr, vr.data());
      std::vector<double> sim(static_cast<size_t>(g_len));
      for (int64_t g = 0; g < g_len; ++g) {
        const float* a = &vr[static_cast<size_t>(g * kvd)];
        const float* b = cache->v(li, p_len + g);
        double ab = 0, aa = 0, bb = 0;
        for (int64_t i = 0; i < kvd; ++i) {
          ab += double(a[i]) * b[i];
          aa += double(a[i]) * a[i];
          bb += double(b[i]) * b[i];
        }
        // torch cosine_similarity: x.y / max(|x| |y|, eps), eps = 1e-8
        sim[static_cast<size_t>(g)] = ab / std::max(std::sqrt(aa) * std::sqrt(bb), 1e-8);
        std::copy_n(a, kvd, cache->v(li, p_len + g));
      }
      std::vector<int32_t> order(static_cast<size_t>(g_len));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return sim[static_cast<size_t>(a)] < sim[static_cast<size_t>(b)];
      });
      order.resize(static_cast<size_t>(static_cast<double>(g_len) * dc.rho));
      std::sort(order.begin(), order.end());
      for (int32_t g : order) rows.push_back(static_cast<int32_t>(p_len + g));
    }
    const int64_t m = static_cast<int64_t>(rows.size());
    if (m > 0) {
      std::vector<float> xs(static_cast<size_t>(m * h)), q(static_cast<size_t>(m * qd)),
          k(static_cast<size_t>(m * kvd)), v(k.size()), attn(q.size()),
          o(static_cast<size_t>(m * h));
      for (int64_t i = 0; i < m; ++i)
        std::copy_n(&xn[static_cast<size_t>(rows[static_cast<size_t>(i)] * h)], h,
                    &xs[static_cast<size_t>(i * h)]);
      project_qkv(L, xs.data(), m, rows, q.data(), k.data(), v.data());
      for (int64_t i = 0; i < m; ++i) {
        const int32_t r = rows[static_cast<size_t>(i)];
        std::copy_n(&k[static_cast<size_t>(i * kvd)], kvd, cache->k(li, r));
        std::copy_n(&v[static_cast<size_t>(i * kvd)], kvd, cache->v(li, r));
      }
      for (int64_t s = 0; s < n; ++s) {
        krows[static_cast<size_t>(s)] = cache->k(li, s);
        vrows[static_cast<size_t>(s)] = cache->v(li, s);
      }
      visible.assign(static_cast<size_t>(m * n), 1);
      cpu::attention(q.data(), qd, krows, vrows, visible, attn.data(), qd, m, c.num_heads,
                     c.num_kv_heads, c.head_dim, scale);
      cpu::matmul_nt(attn.data(), qd, L.o.ptr(), qd, o.data(), h, m, h, qd);
      for (int64_t i = 0; i < m; ++i)
        std::copy_n(&o[static_cast<size_t>(i * h)], h,
                    &cache->attn_out[static_cast<size_t>(li)]
                                    [static_cast<size_t>(rows[static_cast<size_t>(i)] * h)]);
    }
    const std::vector<float>& ao = cache->attn_out[static_cast<size_t>(li)];
    for (size_t i = 0; i < x.size(); ++i) x[i] += ao[i];
    if (m > 0) {
      std::vector<float> xs(static_cast<size_t>(m * h)), gate(static_cast<size_t>(m * inter)),
          up(gate.size()), f(static_cast<size_t>(m * h));
      for (int64_t i = 0; i < m; ++i)
        cpu::rms_norm(&x[static_cast<size_t>(rows[static_cast<size_t>(i)] * h)], h,
                      L.mlp_norm.ptr(), &xs[static_cast<size_t>(i * h)], h, 1, h, eps);
      cpu::matmul_nt(xs.data(), h, L.gate.ptr(), h, gate.data(), inter, m, inter, h);
      cpu::matmul_nt(xs.data(), h, L.up.ptr(), h, up.data(), inter, m, inter, h);
      cpu::silu_mul(gate.data(), up.data(), gate.data(), m * inter);
      cpu::matmul_nt(gate.data(), inter, L.down.ptr(), inter, f.data(), h, m, h, inter);
      for (int64_t i = 0; i < m; ++i)
        std::copy_n(&f[static_cast<size_t>(i * h)], h,
                    &cache->ffn_out[static_cast<size_t>(li)]
                                   [static_cast<size_t>(rows[static_cast<size_t>(i)] * h)]);
    }
    const std::vector<float>& fo = cache->ffn_out[static_cast<size_t>(li)];
    for (size_t i = 0; i < x.size(); ++i) x[i] += fo[i];
  }
  if (first) {
    for (int64_t s = 0; s < n; ++s) cache->set_position(s, static_cast<int32_t>(s));
    cache->set_length(n);
  }
  SequenceResult result;
  compute_outputs(seq, x.data(), result);
  return result;
}

std::vector<SequenceResult> CpuBackend::forward(std::span<const SequenceForward> batch) {
  const ModelConfig& c = config_;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].dllm_cache) continue;
    if (batch.size() != 1) fail("forward request ", i, ": dLLM-Cache runs one sequence per batch");
    validate_forward(c, batch[0], 0);
    return {forward_dllm_cache(batch[0])};
  }
  // Validate and lay out every sequence before touching any cache.
  std::vector<SequenceLayout> layouts;
  int64_t total = 0;
  for (size_t i = 0; i < batch.size(); ++i) validate_forward(c, batch[i], i);
  for (size_t i = 0; i < batch.size(); ++i) {
    layouts.push_back(plan_layout(batch[i], i));
    layouts.back().row_offset = total;
    total += static_cast<int64_t>(batch[i].tokens.size());
  }

  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim,
                inter = c.intermediate_size;
  std::vector<int32_t> positions;
  for (const auto& seq : batch)
    positions.insert(positions.end(), seq.positions.begin(), seq.positions.end());

  std::vector<float> x(static_cast<size_t>(total * h)), xn(x.size());
  std::vector<float> q(static_cast<size_t>(total * qd)), k(static_cast<size_t>(total * kvd)),
      v(k.size());
  std::vector<float> attn(q.size());
  std::vector<float> gate(static_cast<size_t>(total * inter)), up(gate.size());

  // Attention rows (want_attention_rows): [layers, n, width] per sequence, columns = key slots.
  std::vector<SequenceResult> results(batch.size());
  std::vector<float> probs;
  auto rows_wanted_for = [&](size_t si) {
    return batch[si].want_attention_rows || batch[si].want_attention_rollout;
  };
  for (size_t si = 0; si < batch.size(); ++si) {
    if (!rows_wanted_for(si)) continue;
    int64_t width = 0;
    for (int32_t s : layouts[si].key_slots) width = std::max<int64_t>(width, s + 1);
    results[si].attention_width = width;
    results[si].attention_rows.assign(
        static_cast<size_t>(c.num_layers * static_cast<int64_t>(batch[si].tokens.size()) * width),
        0.0f);
  }

  int64_t row = 0;
  for (const auto& seq : batch)
    for (int32_t tok : seq.tokens)
      std::copy_n(embed_.ptr() + static_cast<int64_t>(tok) * h, h,
                  &x[static_cast<size_t>(row++ * h)]);

  const float eps = static_cast<float>(c.norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const CpuLayer& L = layers_[static_cast<size_t>(li)];
    cpu::rms_norm(x.data(), h, L.attn_norm.ptr(), xn.data(), h, total, h, eps);
    cpu::matmul_nt(xn.data(), h, L.q.ptr(), h, q.data(), qd, total, qd, h);
    cpu::matmul_nt(xn.data(), h, L.k.ptr(), h, k.data(), kvd, total, kvd, h);
    cpu::matmul_nt(xn.data(), h, L.v.ptr(), h, v.data(), kvd, total, kvd, h);
    if (c.qkv_bias) {
      for (int64_t r = 0; r < total; ++r) {
        for (int64_t i = 0; i < qd; ++i)
          q[static_cast<size_t>(r * qd + i)] += L.q_bias.data[static_cast<size_t>(i)];
        for (int64_t i = 0; i < kvd; ++i) {
          k[static_cast<size_t>(r * kvd + i)] += L.k_bias.data[static_cast<size_t>(i)];
          v[static_cast<size_t>(r * kvd + i)] += L.v_bias.data[static_cast<size_t>(i)];
        }
      }
    }
    if (c.qk_norm) {
      // Per-head RMSNorm: treat every head of every row as one row of width head_dim.
      cpu::rms_norm(q.data(), hd, L.q_norm.ptr(), q.data(), hd, total * c.num_heads, hd, eps);
      cpu::rms_norm(k.data(), hd, L.k_norm.ptr(), k.data(), hd, total * c.num_kv_heads, hd, eps);
    }
    cpu::rope_neox(q.data(), qd, total, c.num_heads, hd, c.rotary_dim, positions, inv_freq_);
    cpu::rope_neox(k.data(), kvd, total, c.num_kv_heads, hd, c.rotary_dim, positions, inv_freq_);

    for (size_t si = 0; si < batch.size(); ++si) {
      SequenceLayout& lay = layouts[si];
      HostKvCache& cache = *lay.cache;
      const int64_t n = static_cast<int64_t>(batch[si].tokens.size());
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = lay.row_offset + i;
        const int32_t slot = lay.query_slots[static_cast<size_t>(i)];
        std::copy_n(&k[static_cast<size_t>(r * kvd)], kvd, cache.k(li, slot));
        std::copy_n(&v[static_cast<size_t>(r * kvd)], kvd, cache.v(li, slot));
      }
      std::vector<const float*> krows, vrows;
      krows.reserve(lay.key_slots.size());
      vrows.reserve(lay.key_slots.size());
      for (int32_t s : lay.key_slots) {
        krows.push_back(cache.k(li, s));
        vrows.push_back(cache.v(li, s));
      }
      const bool rows_wanted = rows_wanted_for(si);
      const int64_t n_k = static_cast<int64_t>(lay.key_slots.size());
      if (rows_wanted) probs.resize(static_cast<size_t>(n * n_k));
      cpu::attention(&q[static_cast<size_t>(lay.row_offset * qd)], qd, krows, vrows, lay.visible,
                     &attn[static_cast<size_t>(lay.row_offset * qd)], qd, n, c.num_heads,
                     c.num_kv_heads, hd, scale, rows_wanted ? probs.data() : nullptr);
      if (rows_wanted) {
        const int64_t width = results[si].attention_width;
        float* out = &results[si].attention_rows[static_cast<size_t>(li * n * width)];
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n_k; ++j)
            out[i * width + lay.key_slots[static_cast<size_t>(j)]] =
                probs[static_cast<size_t>(i * n_k + j)];
      }
    }
    cpu::matmul_nt(attn.data(), qd, L.o.ptr(), qd, x.data(), h, total, h, qd, /*accumulate=*/true);

    cpu::rms_norm(x.data(), h, L.mlp_norm.ptr(), xn.data(), h, total, h, eps);
    cpu::matmul_nt(xn.data(), h, L.gate.ptr(), h, gate.data(), inter, total, inter, h);
    cpu::matmul_nt(xn.data(), h, L.up.ptr(), h, up.data(), inter, total, inter, h);
    cpu::silu_mul(gate.data(), up.data(), gate.data(), total * inter);
    cpu::matmul_nt(gate.data(), inter, L.down.ptr(), inter, x.data(), h, total, h, inter,
                   /*accumulate=*/true);
  }

  // Commit: positions of every written slot, and the new length for appends.
  for (size_t si = 0; si < batch.size(); ++si) {
    SequenceLayout& lay = layouts[si];
    const auto& seq = batch[si];
    for (size_t i = 0; i < lay.query_slots.size(); ++i)
      lay.cache->set_position(lay.query_slots[i], seq.positions[i]);
    if (seq.write == CacheWrite::kAppend) {
      const int64_t committed =
          seq.append_count >= 0 ? seq.append_count : static_cast<int64_t>(seq.tokens.size());
      lay.cache->set_length(lay.cache->length() + committed);
    }
  }

  // Outputs: final norm + LM head on the wanted rows only.
  for (size_t si = 0; si < batch.size(); ++si) {
    compute_outputs(batch[si], &x[static_cast<size_t>(layouts[si].row_offset * h)], results[si]);
    if (batch[si].want_attention_rollout) {
      SequenceResult& r = results[si];
      r.attention_importance = d2cache::rollout_importance(
          r.attention_rows, c.num_layers, layouts[si].query_slots, r.attention_width);
      if (!batch[si].want_attention_rows) r.attention_rows.clear();
    }
  }
  return results;
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model) {
  return std::make_unique<CpuBackend>(model);
}

}  // namespace dllm
