// CPU backend: the reference forward. fp32 compute from bf16/f16/f32 weights (converted once at
// load), OpenBLAS GEMMs, OpenMP elementwise ops. Sequences of a batch share the GEMMs (their tokens
// are concatenated) and get their own attention.
#include <algorithm>
#include <cmath>
#include <set>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/sequence_slots.h"
#include "core/error.h"
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

std::vector<SequenceResult> CpuBackend::forward(std::span<const SequenceForward> batch) {
  const ModelConfig& c = config_;
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
  for (size_t si = 0; si < batch.size(); ++si) {
    if (!batch[si].want_attention_rows) continue;
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
      const bool rows_wanted = batch[si].want_attention_rows;
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
  const HostTensor& head = tied_ ? embed_ : lm_head_;
  for (size_t si = 0; si < batch.size(); ++si) {
    const auto& seq = batch[si];
    const int64_t m = static_cast<int64_t>(seq.output_rows.size());
    if (m == 0 || !(seq.want_logits || seq.want_stats)) continue;
    std::vector<float> rows(static_cast<size_t>(m * h));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t r = layouts[si].row_offset + seq.output_rows[static_cast<size_t>(i)];
      cpu::rms_norm(&x[static_cast<size_t>(r * h)], h, final_norm_.ptr(),
                    &rows[static_cast<size_t>(i * h)], h, 1, h, eps);
    }
    std::vector<float>& logits = results[si].logits;
    logits.resize(static_cast<size_t>(m * c.vocab_size));
    cpu::matmul_nt(rows.data(), h, head.ptr(), h, logits.data(), c.vocab_size, m, c.vocab_size, h);
    if (seq.want_stats) {
      auto& stats = results[si].stats;
      stats.resize(static_cast<size_t>(m));
#pragma omp parallel for if (m > 1)
      for (int64_t i = 0; i < m; ++i) {
        const size_t row = static_cast<size_t>(seq.output_rows[static_cast<size_t>(i)]);
        const int32_t pos = seq.rng_positions.empty() ? seq.positions[row]
                                                      : seq.rng_positions[static_cast<size_t>(i)];
        const auto row_logits = std::span<const float>(logits).subspan(
            static_cast<size_t>(i * c.vocab_size), static_cast<size_t>(c.vocab_size));
        stats[static_cast<size_t>(i)] = compute_token_stats(row_logits, seq.sampler, seq.rng, pos);
      }
    }
    if (!seq.want_logits) logits.clear();
  }
  return results;
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model) {
  return std::make_unique<CpuBackend>(model);
}

}  // namespace dllm
