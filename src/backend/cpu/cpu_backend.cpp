// CPU backend: the reference forward. One forward runs a batch of sequences through the layer
// list (model/layer_desc.h): the GEMMs over every sequence's rows at once, attention per sequence
// over its K/V pages; dLLM-Cache's reuse is a per-sequence option that narrows the rows a layer
// recomputes (cpu_dllm_cache.cpp).
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/sequence_slots.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "decode/d2cache_selection.h"
#include "model/rope.h"

namespace dllm::cpu_backend {
namespace {

using cpu::WeightMatrix;

CpuFfn ffn_weights(const FfnTensors& f) {
  return {WeightMatrix::of(f.gate), WeightMatrix::of(f.up), WeightMatrix::of(f.down)};
}

CpuLayer load_layer(const LayerTensors& l, const ModelConfig& c) {
  CpuLayer L{to_f32(l.attn_norm),
             WeightMatrix::of(l.q),
             WeightMatrix::of(l.k),
             WeightMatrix::of(l.v),
             WeightMatrix::of(l.o),
             to_f32(l.q_bias),
             to_f32(l.k_bias),
             to_f32(l.v_bias),
             to_f32(l.q_norm),
             to_f32(l.k_norm),
             to_f32(l.mlp_norm),
             ffn_weights({l.gate, l.up, l.down}),
             {}};
  if (l.qkv) {  // fused [Q | K | V] rows (LLaDA2.x): split on the head axis
    const WeightMatrix qkv = WeightMatrix::of(l.qkv);
    L.q = qkv.row_slice(0, c.q_dim());
    L.k = qkv.row_slice(c.q_dim(), c.kv_dim());
    L.v = qkv.row_slice(c.q_dim() + c.kv_dim(), c.kv_dim());
  }
  if (l.router) {
    L.moe.router = WeightMatrix::of(l.router);
    L.moe.expert_bias = to_f32(l.expert_bias);
    for (const FfnTensors& e : l.experts) L.moe.experts.push_back(ffn_weights(e));
    L.moe.shared = ffn_weights(l.shared);
  }
  return L;
}

// Rows [0, n) of `v` gathered at `rows` (width `dim`) into `out`.
void gather_rows(const float* v, std::span<const int64_t> rows, int64_t dim, float* out) {
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy_n(v + rows[i] * dim, dim, out + static_cast<int64_t>(i) * dim);
}

}  // namespace

CpuBackend::CpuBackend(const Model& model)
    : config_(model.config()), desc_(describe_layers(model.config())) {
  const ModelTensors& t = model.tensors();
  embed_ = WeightMatrix::of(t.embed);
  final_norm_ = to_f32(t.final_norm);
  tied_ = t.lm_head == t.embed;
  if (!tied_) lm_head_ = WeightMatrix::of(t.lm_head);
  head_rows_ = model.lm_head_vocab_count();
  vocab_slice_ = model.lm_head_is_vocab_slice();
  for (const LayerTensors& l : t.layers) layers_.push_back(load_layer(l, config_));
  const RopeTable rope = rope_table(config_);
  inv_freq_ = rope.inv_freq;
  rope_scale_ = rope.attention_factor;
}

void CpuBackend::allocate_kv_storage(int64_t num_slots) {
  const size_t n = static_cast<size_t>(num_slots * config_.kv_dim());
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    k_.emplace_back(new float[n]);
    v_.emplace_back(new float[n]);
  }
}

void CpuBackend::copy_kv_pages(std::span<const std::pair<int32_t, int32_t>> copies) {
  const int64_t page = kv_pool().page_size() * config_.kv_dim();
  for (const auto& [from, to] : copies)
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      std::copy_n(k_row(l, 0) + from * page, page, k_row(l, 0) + to * page);
      std::copy_n(v_row(l, 0) + from * page, page, v_row(l, 0) + to * page);
    }
}

void CpuBackend::fill_cache_random(KvCache& cache, int64_t n, uint64_t seed) {
  cache.reserve(n);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t l = 0; l < config_.num_layers; ++l)
    for (int64_t s = 0; s < n; ++s)
      for (float* row : {k_row(l, cache.physical_slot(s)), v_row(l, cache.physical_slot(s))})
        for (int64_t d = 0; d < config_.kv_dim(); ++d) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          row[d] = static_cast<float>(static_cast<int32_t>(state >> 33)) / 2147483648.0f;
        }
  for (int64_t s = 0; s < n; ++s) cache.set_position(s, static_cast<int32_t>(s));
  cache.set_length(n);
}

SequenceRun CpuBackend::plan_run(const SequenceForward& seq, size_t index) {
  const int64_t n = static_cast<int64_t>(seq.tokens.size());
  SequenceRun run;
  run.seq = &seq;
  run.rows = n;
  if (seq.cache) {
    run.cache = seq.cache;
  } else {
    run.owned = std::make_unique<KvCache>(kv_pool());
    run.cache = run.owned.get();
  }
  if (seq.dllm_cache) {  // the canvas is the cache: query i is slot i, every slot a key
    run.query_slots.resize(static_cast<size_t>(n));
    std::iota(run.query_slots.begin(), run.query_slots.end(), 0);
    run.key_slots = run.query_slots;
    run.reuse_first = run.cache->length() == 0;
    prepare_cache_writes(*run.cache, run.query_slots, n);
    return run;
  }
  const SequenceSlots slots = plan_sequence_slots(seq, seq.cache, index);
  prepare_cache_writes(*run.cache, slots.query_slots, slots.needed_capacity);
  run.query_slots = slots.query_slots;
  std::vector<int32_t> cache_positions;
  for (int32_t s : slots.visible_slots)
    cache_positions.push_back(run.cache->positions()[static_cast<size_t>(s)]);
  build_visibility(seq.rule, cache_positions, seq.positions, run.visible);
  run.key_slots = slots.visible_slots;
  run.key_slots.insert(run.key_slots.end(), run.query_slots.begin(), run.query_slots.end());
  return run;
}

void CpuBackend::project_qkv(const CpuLayer& L, const float* xn, int64_t rows,
                             std::span<const int32_t> positions, float* q, float* k,
                             float* v) const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const float eps = static_cast<float>(c.norm_eps);
  if (q) cpu::matmul_nt(xn, h, L.q, q, qd, rows);
  if (k) cpu::matmul_nt(xn, h, L.k, k, kvd, rows);
  if (v) cpu::matmul_nt(xn, h, L.v, v, kvd, rows);
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
  if (c.qk_norm) {  // per-head RMSNorm: every head of every row is one row of width head_dim
    if (q) cpu::rms_norm(q, hd, L.q_norm.ptr(), q, hd, rows * c.num_heads, hd, eps);
    if (k) cpu::rms_norm(k, hd, L.k_norm.ptr(), k, hd, rows * c.num_kv_heads, hd, eps);
  }
  if (q)
    cpu::rope_neox(q, qd, rows, c.num_heads, hd, c.rotary_dim, positions, inv_freq_, rope_scale_);
  if (k)
    cpu::rope_neox(k, kvd, rows, c.num_kv_heads, hd, c.rotary_dim, positions, inv_freq_,
                   rope_scale_);
}

void CpuBackend::attend(int64_t layer, SequenceRun& run, const float* q, float* out,
                        SequenceResult& result) const {
  auto& self = const_cast<CpuBackend&>(*this);
  std::vector<const float*> krows, vrows;
  krows.reserve(run.key_slots.size());
  vrows.reserve(run.key_slots.size());
  for (int32_t s : run.key_slots) {
    const int64_t phys = run.cache->physical_slot(s);
    krows.push_back(self.k_row(layer, phys));
    vrows.push_back(self.v_row(layer, phys));
  }
  if (run.seq->want_layer_qk) keep_layer_qk(layer, run, krows, q, result);
  if (run.seq->sparse_prefill && attend_sparse_prefill(layer, run, krows, vrows, q, out)) return;
  if (run.seq->sparse && layer >= run.seq->sparse->exact_layers)
    attend_sparse(layer, run, krows, vrows, q, out, result);
  else
    attend_exact(layer, run, krows, vrows, q, out, result);
}

void CpuBackend::attend_all(int64_t layer, std::vector<SequenceRun>& runs, const float* q,
                            float* out, std::vector<SequenceResult>& results) const {
  const int64_t qd = config_.q_dim();
  std::vector<int64_t> first(runs.size() + 1, 0);  // first active row of each sequence
  int64_t largest = 0;                             // multiply-adds of the largest sequence's scores
  for (size_t si = 0; si < runs.size(); ++si) {
    const int64_t n_q = static_cast<int64_t>(runs[si].active.size());
    first[si + 1] = first[si] + n_q;
    largest = std::max(largest, n_q * static_cast<int64_t>(runs[si].key_slots.size()) * qd);
  }
  const auto attend_runs = [&](int64_t begin, int64_t end) {
    for (int64_t si = begin; si < end; ++si) {
      SequenceRun& run = runs[static_cast<size_t>(si)];
      if (run.active.empty()) continue;
      const size_t row = static_cast<size_t>(first[static_cast<size_t>(si)] * qd);
      attend(layer, run, q + row, out + row, results[static_cast<size_t>(si)]);
    }
  };
  // Each sequence reads only its own keys, so the order does not matter, and a sequence's
  // attention has the same bits on one thread or many (cpu_ops.h). Few rows over a short context
  // (a denoising step) are too small to share among threads: the sequences are shared instead.
  // A long one (a prefill) keeps every thread inside its attention.
  constexpr int64_t kSmallAttentionMacs = int64_t{1} << 22;
  const int64_t n = static_cast<int64_t>(runs.size());
  if (n > 1 && largest <= kSmallAttentionMacs)
    parallel_for(n, attend_runs);
  else
    attend_runs(0, n);
}

void CpuBackend::attend_exact(int64_t layer, SequenceRun& run, std::span<const float* const> krows,
                              std::span<const float* const> vrows, const float* q, float* out,
                              SequenceResult& result) const {
  const ModelConfig& c = config_;
  const int64_t qd = c.q_dim();
  const int64_t m = static_cast<int64_t>(run.active.size());
  const int64_t n_k = static_cast<int64_t>(run.key_slots.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (run.seq->dllm_cache) {  // active canvas rows over the whole canvas, everything visible
    const std::vector<uint8_t> all(static_cast<size_t>(m * n_k), 1);
    cpu::attention(q, qd, krows, vrows, all, out, qd, m, c.num_heads, c.num_kv_heads, c.head_dim,
                   scale);
    return;
  }
  const bool rows_wanted = run.seq->want_attention_rows || run.seq->want_attention_rollout;
  std::vector<float> probs(rows_wanted ? static_cast<size_t>(m * n_k) : 0);
  cpu::attention(q, qd, krows, vrows, run.visible, out, qd, m, c.num_heads, c.num_kv_heads,
                 c.head_dim, scale, rows_wanted ? probs.data() : nullptr);
  if (!rows_wanted) return;
  const int64_t width = result.attention_width;
  float* rows = &result.attention_rows[static_cast<size_t>(layer * m * width)];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n_k; ++j)
      rows[i * width + run.key_slots[static_cast<size_t>(j)]] =
          probs[static_cast<size_t>(i * n_k + j)];
}

void CpuBackend::add_block_output(int64_t layer, SequenceRun& run, const float* out, bool ffn,
                                  float* x) const {
  if (run.seq->dllm_cache) {
    reuse_store_and_add(layer, run, out, ffn, x);
    return;
  }
  const int64_t h = config_.hidden_size;
  for (size_t i = 0; i < run.active.size(); ++i) {
    float* xr = x + (run.row_offset + run.active[i]) * h;
    const float* o = out + static_cast<int64_t>(i) * h;
    for (int64_t j = 0; j < h; ++j) xr[j] += o[j];
  }
}

void CpuBackend::run_ffn(int64_t li, const float* xn, int64_t m, float* out,
                         MoeRoutingReport* routing) const {
  const LayerDesc& d = desc_[static_cast<size_t>(li)];
  const CpuLayer& L = layers_[static_cast<size_t>(li)];
  const int64_t h = config_.hidden_size;
  if (d.ffn == FfnKind::kMoeSwiGlu) {
    const int64_t used = moe_ffn(d.moe, L.moe, xn, m, h, out, routing);
    if (profiling_) moe_touched_.add(used);
    return;
  }
  swiglu_ffn(L.ffn, xn, m, h, out, scratch_.gate, scratch_.up);
}

void CpuBackend::set_profiling(bool on) {
  profiling_ = on;
  moe_touched_ = {};
}

std::optional<double> CpuBackend::profiled_moe_experts_touched() const {
  return moe_touched_.average();
}

std::vector<SequenceResult> CpuBackend::forward(std::span<const SequenceForward> batch) {
  const ModelConfig& c = config_;
  for (size_t i = 0; i < batch.size(); ++i) {
    validate_forward(c, batch[i], i);
    if (vocab_slice_ && (batch[i].verify || batch[i].retain_logits))
      fail("forward request ", i, ": a vocabulary-parallel rank keeps no draft rows (internal)");
  }
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].state && !dynamic_cast<CpuMethodState*>(batch[i].state))
      fail("forward request ", i, ": the method state was not created by the CPU backend");
  for (size_t i = 0; i < batch.size(); ++i) check_sparse_state(batch[i], i);
  // Lay out every sequence (slots, pages) before any K/V is written.
  std::vector<SequenceRun> runs;
  int64_t total = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    runs.push_back(plan_run(batch[i], i));
    runs.back().row_offset = total;
    total += runs.back().rows;
  }
  std::vector<SequenceResult> results(batch.size());
  for (size_t si = 0; si < batch.size(); ++si) {
    if (!(batch[si].want_attention_rows || batch[si].want_attention_rollout)) continue;
    int64_t width = 0;
    for (int32_t s : runs[si].key_slots) width = std::max<int64_t>(width, s + 1);
    results[si].attention_width = width;
    results[si].attention_rows.assign(static_cast<size_t>(c.num_layers * runs[si].rows * width),
                                      0.0f);
  }
  for (size_t si = 0; si < batch.size(); ++si)
    if (batch[si].sparse && batch[si].sparse->want_selection)
      results[si].sparse_selection.resize(static_cast<size_t>(c.num_layers * c.num_kv_heads));

  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim();
  Scratch& sc = scratch_;
  std::vector<float>& x = sc.x;
  x.resize(static_cast<size_t>(total * h));
  {
    int64_t row = 0;
    for (const auto& seq : batch)
      for (size_t i = 0; i < seq.tokens.size(); ++i) {
        // Given embeddings (vision features) where the request has them, else the token's row.
        const float* given =
            seq.input_embeddings ? seq.input_embeddings->at(seq.positions[i]) : nullptr;
        float* xr = &x[static_cast<size_t>(row++ * h)];
        if (given)
          std::copy_n(given, h, xr);
        else
          embed_.row_to_f32(seq.tokens[i], xr);
      }
  }
  const float eps = static_cast<float>(c.norm_eps);
  std::vector<float>&xn = sc.xn, &q = sc.q, &k = sc.k, &v = sc.v, &attn = sc.attn, &o = sc.o;
  std::vector<int64_t> rows;       // batch rows recomputed in this layer
  std::vector<int32_t> positions;  // their positions
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const CpuLayer& L = layers_[static_cast<size_t>(li)];
    rows.clear();
    positions.clear();
    for (SequenceRun& run : runs) {
      if (run.seq->dllm_cache) {
        reuse_select_rows(li, run, x.data());
      } else if (run.active.empty()) {
        run.active.resize(static_cast<size_t>(run.rows));
        std::iota(run.active.begin(), run.active.end(), 0);
      }
      for (int32_t r : run.active) {
        rows.push_back(run.row_offset + r);
        positions.push_back(run.seq->positions[static_cast<size_t>(r)]);
      }
    }
    const int64_t m = static_cast<int64_t>(rows.size());
    xn.resize(static_cast<size_t>(m * h));
    q.resize(static_cast<size_t>(m * qd));
    k.resize(static_cast<size_t>(m * kvd));
    v.resize(k.size());
    attn.resize(q.size());
    o.resize(xn.size());

    // Attention block.
    gather_rows(x.data(), rows, h, xn.data());
    cpu::rms_norm(xn.data(), h, L.attn_norm.ptr(), xn.data(), h, m, h, eps);
    project_qkv(L, xn.data(), m, positions, q.data(), k.data(), v.data());
    int64_t at = 0;
    for (SequenceRun& run : runs) {
      for (size_t i = 0; i < run.active.size(); ++i) {
        const int64_t phys =
            run.cache->physical_slot(run.query_slots[static_cast<size_t>(run.active[i])]);
        std::copy_n(&k[static_cast<size_t>((at + int64_t(i)) * kvd)], kvd, k_row(li, phys));
        std::copy_n(&v[static_cast<size_t>((at + int64_t(i)) * kvd)], kvd, v_row(li, phys));
      }
      at += static_cast<int64_t>(run.active.size());
    }
    attend_all(li, runs, q.data(), attn.data(), results);
    cpu::matmul_nt(attn.data(), qd, L.o, o.data(), h, m);
    if (reduce_) reduce_(o.data(), m * h);
    at = 0;
    for (SequenceRun& run : runs) {
      add_block_output(li, run, &o[static_cast<size_t>(at * h)], /*ffn=*/false, x.data());
      at += static_cast<int64_t>(run.active.size());
    }

    // FFN block, over the same rows.
    gather_rows(x.data(), rows, h, xn.data());
    cpu::rms_norm(xn.data(), h, L.mlp_norm.ptr(), xn.data(), h, m, h, eps);
    const bool report_routing =
        desc_[static_cast<size_t>(li)].ffn == FfnKind::kMoeSwiGlu &&
        std::any_of(batch.begin(), batch.end(), [](const auto& s) { return s.want_routing; });
    MoeRoutingReport routing;
    run_ffn(li, xn.data(), m, o.data(), report_routing ? &routing : nullptr);
    if (report_routing) {  // the report's rows are the runs' active rows, in order
      int64_t first = 0;
      for (size_t si = 0; si < runs.size(); ++si) {
        const auto count = static_cast<int64_t>(runs[si].active.size());
        if (batch[si].want_routing) routing.give(first, count, results[si]);
        first += count;
      }
    }
    if (reduce_) reduce_(o.data(), m * h);
    at = 0;
    for (SequenceRun& run : runs) {
      add_block_output(li, run, &o[static_cast<size_t>(at * h)], /*ffn=*/true, x.data());
      at += static_cast<int64_t>(run.active.size());
    }
  }

  // Commit: positions of every written slot, and the new length for appends.
  for (SequenceRun& run : runs) {
    const SequenceForward& seq = *run.seq;
    if (seq.dllm_cache) {
      reuse_finish(run);
      continue;
    }
    commit_cache_writes(seq, *run.cache, run.query_slots);
  }
  // Outputs: final norm + LM head on the wanted rows only.
  compute_outputs(batch, runs, x.data(), results);
  for (size_t si = 0; si < batch.size(); ++si) {
    if (batch[si].want_attention_rollout) {
      SequenceResult& r = results[si];
      r.attention_importance = d2cache::rollout_importance(r.attention_rows, c.num_layers,
                                                           runs[si].query_slots, r.attention_width);
      if (!batch[si].want_attention_rows) r.attention_rows.clear();
    }
  }
  return results;
}

}  // namespace dllm::cpu_backend

namespace dllm {

std::unique_ptr<Backend> make_cpu_backend(const Model& model) {
  return std::make_unique<cpu_backend::CpuBackend>(model);
}

}  // namespace dllm
