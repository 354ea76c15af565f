// dLLM-Cache steps on the CUDA backend (method-specs §6.3). Step for step the CPU reference,
// CpuBackend::forward_dllm_cache: the queries are the whole canvas; the first forward computes
// and caches, per layer, K/V and every row's attention output (after o_proj) and FFN output;
// later forwards keep each row's hidden state as residual + cached outputs and recompute per
// layer only the prompt rows (refresh_prompt), the response rows (refresh_response) — layer 0
// always both — or otherwise the response rows whose new V is least similar to the cached one.
//
// This is a baseline: the similarity scores come back to the host once per layer (a sync per
// layer) and the host picks the rows, as the reference does with torch.topk on the device.
// Steps are not captured as CUDA graphs (their rows change every layer).
#include <algorithm>
#include <numeric>

#include "backend/cuda/cuda_backend_impl.h"

namespace dllm::cuda_backend {

SequenceResult CudaBackend::forward_dllm_cache(const SequenceForward& seq) {
  const ModelConfig& c = config_;
  const DllmCacheStep& dc = *seq.dllm_cache;
  auto* cache = dynamic_cast<cuda::CudaKvCache*>(seq.cache);
  if (!cache) fail("forward request 0: dLLM-Cache needs a cache created by the CUDA backend");
  // Request shape (prompt length, positions, write, canvas vs cache): validate_forward.
  const int64_t n = static_cast<int64_t>(seq.tokens.size());
  const int64_t p_len = dc.prompt_length, g_len = n - p_len;
  const bool first = cache->length() == 0;
  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), D = c.head_dim,
                inter = c.intermediate_size, qkvd = qd + 2 * kvd;
  const size_t layer_elems = static_cast<size_t>(n * h);
  const float eps = static_cast<float>(c.norm_eps);
  const int M = static_cast<int>(seq.output_rows.size());

  if (first) {
    cache->reserve(n);
    cache->dllm_attn_out.resize(c.num_layers * layer_elems, "dLLM-Cache attention outputs");
    cache->dllm_ffn_out.resize(c.num_layers * layer_elems, "dLLM-Cache FFN outputs");
  } else if (cache->dllm_attn_out.size() != c.num_layers * layer_elems) {
    fail("forward request 0: the cache was not filled by a dLLM-Cache forward of ", n, " tokens");
  }
  // Scratch for the worst case (every row recomputed).
  const int splits = cuda::attention_splits(static_cast<int>(n), static_cast<int>(c.num_heads),
                                            static_cast<int>(c.num_kv_heads), static_cast<int>(D),
                                            static_cast<int>(n), num_sms_);
  bool moved = false;
  moved |= x_.ensure(layer_elems, "activations");
  moved |= xn_.ensure(layer_elems, "activations");
  moved |= qkv_.ensure(static_cast<size_t>(n * qkvd), "q/k/v activations");
  moved |= q_.ensure(static_cast<size_t>(n * qd), "queries");
  moved |= attn_.ensure(static_cast<size_t>(n * qd), "attention outputs");
  moved |= gu_.ensure(static_cast<size_t>(n * 2 * inter), "gate/up activations");
  moved |= act_.ensure(static_cast<size_t>(n * inter), "MLP activations");
  moved |= cuda::attention_workspace_ensure(
      attn_ws_,
      cuda::attention_workspace_floats(static_cast<int>(n), static_cast<int>(c.num_heads),
                                       static_cast<int>(D), splits),
      stream_);
  // ints_: [tokens | 0..n-1 | rows of the current layer | output rows | key count]
  moved |= ints_.ensure(static_cast<size_t>(3 * n + M + 1), "staging");
  if (M > 0) {
    moved |= hn_.ensure(static_cast<size_t>(M * h), "output rows");
    moved |= logits_.ensure(static_cast<size_t>(M) * c.vocab_size, "logits");
    moved |= stats_.ensure(static_cast<size_t>(M), "token statistics");
  }
  if (moved) drop_graphs();
  dlc_out_.ensure(layer_elems, "dLLM-Cache row outputs");
  dlc_sim_.ensure(static_cast<size_t>(g_len), "dLLM-Cache similarities");

  // Host arrays stay alive until the final sync (asynchronous copies read them).
  std::vector<int32_t> head(static_cast<size_t>(2 * n));
  std::copy(seq.tokens.begin(), seq.tokens.end(), head.begin());
  std::iota(head.begin() + n, head.end(), 0);
  std::vector<int32_t> tail(seq.output_rows.begin(), seq.output_rows.end());
  tail.push_back(static_cast<int32_t>(n));
  int32_t* d_tokens = ints_.get();
  int32_t* d_iota = d_tokens + n;
  int32_t* d_rows = d_iota + n;
  int32_t* d_out_rows = d_rows + n;
  int32_t* d_n_keys = d_out_rows + M;
  DLLM_CUDA_CHECK(cudaMemcpyAsync(d_tokens, head.data(), head.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
  DLLM_CUDA_CHECK(cudaMemcpyAsync(d_out_rows, tail.data(), tail.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));

  cuda::embed(d_tokens, embed_.get(), x_.get(), static_cast<int>(n), static_cast<int>(h), stream_);
  std::vector<std::vector<int32_t>> layer_rows(static_cast<size_t>(c.num_layers));
  std::vector<float> sim(static_cast<size_t>(g_len));
  for (int64_t li = 0; li < c.num_layers; ++li) {
    CudaLayer& L = layers_[static_cast<size_t>(li)];
    float* attn_out = cache->dllm_attn_out.get() + li * layer_elems;
    float* ffn_out = cache->dllm_ffn_out.get() + li * layer_elems;
    const bool rp = first || dc.refresh_prompt || li == 0;
    const bool rr = first || dc.refresh_response || li == 0;
    std::vector<int32_t>& rows = layer_rows[static_cast<size_t>(li)];
    if (rp)
      for (int32_t r = 0; r < p_len; ++r) rows.push_back(r);
    if (rr) {
      for (int32_t r = static_cast<int32_t>(p_len); r < n; ++r) rows.push_back(r);
    } else if (dc.rho > 0.0f) {
      // V of every response row (written to the cache), then the least similar ones refresh.
      cuda::rms_norm(x_.get(), d_iota + p_len, L.attn_norm.get(), xn_.get(),
                     static_cast<int>(g_len), static_cast<int>(h), eps, stream_);
      cuda::gemm_nt(cublas_, xn_.get(), L.qkv.get() + (qd + kvd) * h, qkv_.get(), CUDA_R_32F,
                    static_cast<int>(g_len), static_cast<int>(kvd), static_cast<int>(h), false);
      cuda::value_similarity(qkv_.get(), L.qkv_bias.get() ? L.qkv_bias.get() + qd + kvd : nullptr,
                             cache->v(li) + p_len * kvd, dlc_sim_.get(), static_cast<int>(g_len),
                             static_cast<int>(kvd), stream_);
      DLLM_CUDA_CHECK(cudaMemcpyAsync(sim.data(), dlc_sim_.get(), sim.size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream_));
      DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      std::vector<int32_t> order(static_cast<size_t>(g_len));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return sim[static_cast<size_t>(a)] < sim[static_cast<size_t>(b)];
      });
      order.resize(static_cast<size_t>(static_cast<double>(g_len) * dc.rho));
      std::sort(order.begin(), order.end());
      for (int32_t g : order) rows.push_back(static_cast<int32_t>(p_len + g));
    }
    const int m = static_cast<int>(rows.size());
    if (m > 0) {
      DLLM_CUDA_CHECK(cudaMemcpyAsync(d_rows, rows.data(), rows.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, stream_));
      cuda::rms_norm(x_.get(), d_rows, L.attn_norm.get(), xn_.get(), m, static_cast<int>(h), eps,
                     stream_);
      cuda::gemm_nt(cublas_, xn_.get(), L.qkv.get(), qkv_.get(), CUDA_R_32F, m,
                    static_cast<int>(qkvd), static_cast<int>(h), false);
      cuda::QkvPostParams qp;
      qp.qkv = qkv_.get();
      qp.bias = L.qkv_bias.get();
      qp.q_norm = L.q_norm.get();
      qp.k_norm = L.k_norm.get();
      qp.positions = d_rows;  // canvas row = position = cache slot
      qp.slots = d_rows;
      qp.inv_freq = inv_freq_.get();
      qp.q_out = q_.get();
      qp.k_cache = cache->k(li);
      qp.v_cache = cache->v(li);
      qp.slot_positions = li == 0 ? cache->slot_positions() : nullptr;
      qp.n = m;
      qp.heads = static_cast<int>(c.num_heads);
      qp.kv_heads = static_cast<int>(c.num_kv_heads);
      qp.head_dim = static_cast<int>(D);
      qp.rotary_dim = static_cast<int>(c.rotary_dim);
      qp.eps = eps;
      cuda::qkv_post(qp, stream_);

      // The recomputed rows attend bidirectionally to every canvas slot (slots 0..n-1).
      cuda::AttentionParams ap;
      ap.q = q_.get();
      ap.k_cache = qp.k_cache;
      ap.v_cache = qp.v_cache;
      ap.n_keys = d_n_keys;
      ap.slot_positions = cache->slot_positions();
      ap.q_positions = d_rows;
      ap.kind = cuda::MaskKind::kBidirectional;
      ap.n_q = m;
      ap.max_keys = static_cast<int>(n);
      ap.heads = qp.heads;
      ap.kv_heads = qp.kv_heads;
      ap.head_dim = qp.head_dim;
      ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
      ap.splits =
          cuda::attention_splits(m, ap.heads, ap.kv_heads, ap.head_dim, ap.max_keys, num_sms_);
      cuda::attention_use_workspace(ap, attn_ws_.get());
      ap.out = attn_.get();
      cuda::attention(ap, stream_);
      cuda::gemm_nt(cublas_, attn_.get(), L.o.get(), dlc_out_.get(), CUDA_R_32F, m,
                    static_cast<int>(h), static_cast<int>(qd), false);
      cuda::scatter_rows(dlc_out_.get(), d_rows, attn_out, m, static_cast<int>(h), stream_);
    }
    cuda::add_inplace(x_.get(), attn_out, static_cast<int64_t>(layer_elems), stream_);
    if (m > 0) {
      cuda::rms_norm(x_.get(), d_rows, L.mlp_norm.get(), xn_.get(), m, static_cast<int>(h), eps,
                     stream_);
      cuda::gemm_nt(cublas_, xn_.get(), L.gate_up.get(), gu_.get(), CUDA_R_16BF, m,
                    static_cast<int>(2 * inter), static_cast<int>(h), false);
      cuda::swiglu(gu_.get(), act_.get(), m, static_cast<int>(inter), stream_);
      cuda::gemm_nt(cublas_, act_.get(), L.down.get(), dlc_out_.get(), CUDA_R_32F, m,
                    static_cast<int>(h), static_cast<int>(inter), false);
      cuda::scatter_rows(dlc_out_.get(), d_rows, ffn_out, m, static_cast<int>(h), stream_);
    }
    cuda::add_inplace(x_.get(), ffn_out, static_cast<int64_t>(layer_elems), stream_);
  }

  SequenceResult result;
  std::vector<cuda::DeviceTokenStats> dev_stats(static_cast<size_t>(M));
  const bool host_rows = seq.want_logits || (seq.want_stats && !device_stats_suffice(seq.sampler));
  if (M > 0) {
    cuda::rms_norm(x_.get(), d_out_rows, final_norm_.get(), hn_.get(), M, static_cast<int>(h), eps,
                   stream_);
    cuda::gemm_nt(cublas_, hn_.get(), tied_ ? embed_.get() : lm_head_.get(), logits_.get(),
                  CUDA_R_32F, M, static_cast<int>(c.vocab_size), static_cast<int>(h), false);
    if (host_rows) {
      result.logits.resize(static_cast<size_t>(M) * c.vocab_size);
      DLLM_CUDA_CHECK(cudaMemcpyAsync(result.logits.data(), logits_.get(),
                                      result.logits.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                      stream_));
    } else if (seq.want_stats) {
      cuda::BannedTokens ban;
      for (int32_t id : seq.sampler.banned_tokens) ban.ids[ban.n++] = id;
      cuda::greedy_token_stats(logits_.get(), M, static_cast<int>(c.vocab_size), ban, stats_.get(),
                               stream_);
      DLLM_CUDA_CHECK(cudaMemcpyAsync(dev_stats.data(), stats_.get(),
                                      dev_stats.size() * sizeof(cuda::DeviceTokenStats),
                                      cudaMemcpyDeviceToHost, stream_));
    }
  }
  DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (first) {
    for (int64_t s = 0; s < n; ++s) cache->set_position(s, static_cast<int32_t>(s));
    cache->set_length(n);
  }
  if (M > 0 && seq.want_stats) {
    result.stats.resize(static_cast<size_t>(M));
    if (host_rows) {
      host_token_stats(c, seq, result.logits, result.stats);
    } else {
      for (int i = 0; i < M; ++i)
        result.stats[static_cast<size_t>(i)] = from_device_stats(dev_stats[static_cast<size_t>(i)]);
    }
  }
  if (!seq.want_logits) result.logits.clear();
  return result;
}

}  // namespace dllm::cuda_backend
