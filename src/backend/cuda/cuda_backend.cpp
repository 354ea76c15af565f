// CUDA backend: the same forward contract as the CPU reference, in bf16 with fp32 accumulation.
// Weights are uploaded once as bf16 (q|k|v and gate|up fused into one GEMM each); the residual
// stream stays fp32; cuBLAS runs the GEMMs, our kernels the rest (kernels.h). Greedy TokenStats
// are computed on the device, so only four numbers per row come back; sampling with filters
// falls back to the host reference on the wanted rows' logits.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/sequence_slots.h"
#include "decode/s2d2_verify.h"

namespace dllm::cuda_backend {

std::vector<SequenceResult> CudaBackend::forward(std::span<const SequenceForward> batch) {
  const ModelConfig& c = config_;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].dllm_cache) continue;
    if (batch.size() != 1) fail("forward request ", i, ": dLLM-Cache runs one sequence per batch");
    validate_forward(c, batch[0], 0);
    return {forward_dllm_cache(batch[0])};
  }
  for (size_t i = 0; i < batch.size(); ++i) validate_forward(c, batch[i], i);

  // Plan slots and pack every small integer array into one staging buffer.
  std::vector<SeqPlan> plans(batch.size());
  std::vector<int32_t> ints;
  std::vector<uint8_t> masks;
  int64_t total = 0, total_out = 0;
  for (size_t si = 0; si < batch.size(); ++si) {
    const SequenceForward& seq = batch[si];
    SeqPlan& p = plans[si];
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    if ((seq.want_attention_rows || seq.want_attention_rollout) &&
        seq.rule.kind != AttentionKind::kBidirectional)
      fail("forward request ", si,
           ": attention rows (d2Cache rollout) need bidirectional attention on the CUDA backend");
    if (seq.cache) {
      p.cache = dynamic_cast<cuda::CudaKvCache*>(seq.cache);
      if (!p.cache) fail("forward request ", si, ": the cache was not created by the CUDA backend");
      if (seq.verify)
        for (int32_t d : seq.verify->draft_rows)
          if (d >= p.cache->kept_rows)
            fail("forward request ", si, ": verify: draft row ", d, " but the draft forward kept ",
                 p.cache->kept_rows, " rows");
    } else {
      p.owned = std::make_unique<cuda::CudaKvCache>(c.num_layers, c.kv_dim(), n, stream_);
      p.cache = p.owned.get();
    }
    p.slots = plan_sequence_slots(seq, seq.cache ? p.cache : nullptr, si);
    p.row_offset = total;
    total += n;
    total_out += static_cast<int64_t>(seq.output_rows.size());
    p.n_keys = static_cast<int64_t>(p.slots.visible_slots.size()) + n;
    if (seq.rule.kind == AttentionKind::kCustom) {
      if (seq.rule.custom_mask.size() != static_cast<size_t>(n * p.n_keys))
        fail("forward request ", si, ": custom attention mask has ", seq.rule.custom_mask.size(),
             " entries, expected ", n, " x ", p.n_keys, " (queries x [visible cache | queries])");
      p.has_mask = true;
      p.mask_at = masks.size();
      // When every query sees the whole cache (S2D2's verifier), send only the query columns:
      // the kernel then treats cache tiles as fully visible, and far fewer bytes move.
      const int64_t nc = p.n_keys - n;
      bool cache_visible = true;
      for (int64_t r = 0; r < n && cache_visible; ++r) {
        const auto row = seq.rule.custom_mask.begin() + r * p.n_keys;
        cache_visible = std::all_of(row, row + nc, [](uint8_t v) { return v != 0; });
      }
      p.mask_queries_only = cache_visible;
      if (cache_visible) {
        for (int64_t r = 0; r < n; ++r) {
          const auto row = seq.rule.custom_mask.begin() + r * p.n_keys + nc;
          masks.insert(masks.end(), row, row + n);
        }
      } else {
        masks.insert(masks.end(), seq.rule.custom_mask.begin(), seq.rule.custom_mask.end());
      }
    }
  }
  for (auto& p : plans)
    p.cache->reserve(p.slots.needed_capacity);  // after all checks: nothing changed on error
  const size_t tokens_at = 0, positions_at = static_cast<size_t>(total);
  ints.resize(static_cast<size_t>(2 * total));
  for (size_t si = 0; si < batch.size(); ++si) {
    std::copy(batch[si].tokens.begin(), batch[si].tokens.end(),
              ints.begin() + plans[si].row_offset);
    std::copy(batch[si].positions.begin(), batch[si].positions.end(),
              ints.begin() + total + plans[si].row_offset);
  }
  for (auto& p : plans) {
    p.slots_at = ints.size();
    ints.insert(ints.end(), p.slots.query_slots.begin(), p.slots.query_slots.end());
    p.keys_at = ints.size();
    if (!p.slots.contiguous) {
      ints.insert(ints.end(), p.slots.visible_slots.begin(), p.slots.visible_slots.end());
      ints.insert(ints.end(), p.slots.query_slots.begin(), p.slots.query_slots.end());
    }
    p.nkeys_at = ints.size();
    ints.push_back(static_cast<int32_t>(p.n_keys));
  }
  const size_t out_rows_at = ints.size();
  for (size_t si = 0; si < batch.size(); ++si)
    for (int32_t r : batch[si].output_rows)
      ints.push_back(static_cast<int32_t>(plans[si].row_offset + r));

  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), D = c.head_dim,
                inter = c.intermediate_size;
  const int64_t qkvd = qd + 2 * kvd;
  const int M = static_cast<int>(total_out);

  // A single-sequence step of a shape seen before (a denoising step, a WeDLM window, an AR
  // token) replays a captured CUDA graph: its inputs (tokens, positions, the cache slots it
  // writes) travel through pinned staging, the key count is read on the device, and the attention
  // grid covers a power-of-two bucket of keys so one graph serves a growing context.
  const SequenceForward& s0 = batch[0];
  const bool graphable = graphs_enabled_ && !profiling_ && batch.size() == 1 && s0.cache &&
                         !wants_rows(s0) && s0.write != CacheWrite::kAtSlots &&
                         plans[0].slots.contiguous && s0.rule.kind != AttentionKind::kCustom &&
                         !s0.want_logits && !s0.retain_logits && !s0.verify && M > 0 &&
                         s0.want_stats && device_stats_suffice(s0.sampler);
  for (auto& p : plans) {
    p.max_keys = p.n_keys;
    if (graphable) {
      p.max_keys = 256;
      while (p.max_keys < p.n_keys) p.max_keys *= 2;
    }
  }

  bool moved = false;
  moved |= x_.ensure(static_cast<size_t>(total * h), "activations");
  moved |= xn_.ensure(static_cast<size_t>(total * h), "activations");
  moved |= qkv_.ensure(static_cast<size_t>(total * qkvd), "activations");
  moved |= q_.ensure(static_cast<size_t>(total * qd), "activations");
  moved |= attn_.ensure(static_cast<size_t>(total * qd), "activations");
  moved |= gu_.ensure(static_cast<size_t>(total * 2 * inter), "activations");
  moved |= act_.ensure(static_cast<size_t>(total * inter), "activations");
  moved |= ints_.ensure(ints.size(), "staging");
  if (!masks.empty()) moved |= masks_.ensure(masks.size(), "attention masks");
  if (M > 0) {
    moved |= hn_.ensure(static_cast<size_t>(M * h), "output rows");
    moved |= logits_.ensure(static_cast<size_t>(M) * c.vocab_size, "logits");
    moved |= stats_.ensure(static_cast<size_t>(M), "token statistics");
  }
  size_t ws = 0, rows_ws = 0;
  std::vector<int> splits(batch.size());
  for (size_t si = 0; si < batch.size(); ++si) {
    const int n = static_cast<int>(batch[si].tokens.size());
    splits[si] =
        cuda::attention_splits(n, static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads),
                               static_cast<int>(D), static_cast<int>(plans[si].max_keys), num_sms_);
    ws = std::max(ws, cuda::attention_workspace_floats(n, static_cast<int>(c.num_heads),
                                                       static_cast<int>(D), splits[si]));
    if (wants_rows(batch[si]))
      rows_ws =
          std::max(rows_ws, cuda::attention_rows_workspace_floats(
                                n, static_cast<int>(plans[si].n_keys),
                                static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads)));
  }
  moved |= cuda::attention_workspace_ensure(attn_ws_, ws, stream_);
  moved |= attn_rows_ws_.ensure(rows_ws, "attention-rows workspace");
  moved |= pinned_ints_.ensure(ints.size());
  moved |= pinned_stats_.ensure(static_cast<size_t>(std::max(M, 1)));
  // Attention rows (want_attention_rows): [layers, n, width] per sequence, columns = key slots,
  // one after another in attn_rows_out_ (a member: allocating per forward would sync the device).
  std::vector<size_t> rows_at(batch.size(), 0), rows_count(batch.size(), 0);
  size_t rows_total = 0;
  std::vector<int64_t> rows_width(batch.size(), 0);
  for (size_t si = 0; si < batch.size(); ++si) {
    if (!wants_rows(batch[si])) continue;
    const SeqPlan& p = plans[si];
    if (static_cast<size_t>(p.n_keys) > cuda::attention_rows_max_keys())
      fail("forward request ", si, ": attention rows over ", p.n_keys,
           " keys exceed the CUDA kernel's ", cuda::attention_rows_max_keys());
    int64_t width = 0;
    for (int32_t sl : p.slots.visible_slots) width = std::max<int64_t>(width, sl + 1);
    for (int32_t sl : p.slots.query_slots) width = std::max<int64_t>(width, sl + 1);
    rows_width[si] = width;
    rows_at[si] = rows_total;
    rows_count[si] =
        static_cast<size_t>(c.num_layers) * batch[si].tokens.size() * static_cast<size_t>(width);
    rows_total += rows_count[si];
  }
  moved |= attn_rows_out_.ensure(rows_total, "attention rows");
  if (moved) drop_graphs();

  std::vector<SequenceResult> results(batch.size());
  std::vector<cuda::DeviceTokenStats> host_stats(static_cast<size_t>(M));
  for (size_t si = 0; si < batch.size(); ++si) results[si].attention_width = rows_width[si];
  if (rows_total > 0)
    DLLM_CUDA_CHECK(cudaMemsetAsync(attn_rows_out_.get(), 0, rows_total * sizeof(float), stream_));
  // Everything the GPU does for this forward, in stream order; captured as a graph or run directly.
  auto enqueue = [&](const int32_t* ints_src, cuda::DeviceTokenStats* stats_dst) {
    DLLM_CUDA_CHECK(cudaMemcpyAsync(ints_.get(), ints_src, ints.size() * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream_));
    if (!masks.empty())
      DLLM_CUDA_CHECK(cudaMemcpyAsync(masks_.get(), masks.data(), masks.size(),
                                      cudaMemcpyHostToDevice, stream_));
    const int32_t* d_ints = ints_.get();

    const float eps = static_cast<float>(c.norm_eps);
    const int T = static_cast<int>(total);
    op_begin("embedding");
    cuda::embed(d_ints + tokens_at, embed_.get(), x_.get(), T, static_cast<int>(h), stream_);
    op_end();
    for (int64_t li = 0; li < c.num_layers; ++li) {
      CudaLayer& L = layers_[static_cast<size_t>(li)];
      op_begin("norms");
      cuda::rms_norm(x_.get(), nullptr, L.attn_norm.get(), xn_.get(), T, static_cast<int>(h), eps,
                     stream_);
      op_end();
      op_begin("gemm");
      cuda::gemm_nt(cublas_, xn_.get(), L.qkv.get(), qkv_.get(), CUDA_R_32F, T,
                    static_cast<int>(qkvd), static_cast<int>(h), false);
      op_end();
      for (size_t si = 0; si < batch.size(); ++si) {
        SeqPlan& p = plans[si];
        const int n = static_cast<int>(batch[si].tokens.size());
        cuda::QkvPostParams qp;
        qp.qkv = qkv_.get() + p.row_offset * qkvd;
        qp.bias = L.qkv_bias.get();
        qp.q_norm = L.q_norm.get();
        qp.k_norm = L.k_norm.get();
        qp.positions = d_ints + positions_at + p.row_offset;
        qp.slots = d_ints + p.slots_at;
        qp.inv_freq = inv_freq_.get();
        qp.q_out = q_.get() + p.row_offset * qd;
        qp.k_cache = p.cache->k(li);
        qp.v_cache = p.cache->v(li);
        qp.slot_positions = li == 0 ? p.cache->slot_positions() : nullptr;
        qp.n = n;
        qp.heads = static_cast<int>(c.num_heads);
        qp.kv_heads = static_cast<int>(c.num_kv_heads);
        qp.head_dim = static_cast<int>(D);
        qp.rotary_dim = static_cast<int>(c.rotary_dim);
        qp.eps = eps;
        op_begin("qk-norm+rope+cache write");
        cuda::qkv_post(qp, stream_);
        op_end();

        cuda::AttentionParams ap;
        ap.q = qp.q_out;
        ap.k_cache = qp.k_cache;
        ap.v_cache = qp.v_cache;
        ap.key_slots = p.slots.contiguous ? nullptr : d_ints + p.keys_at;
        ap.n_keys = d_ints + p.nkeys_at;
        ap.slot_positions = p.cache->slot_positions();
        ap.q_positions = qp.positions;
        ap.custom_mask = p.has_mask ? masks_.get() + p.mask_at : nullptr;
        ap.custom_mask_queries_only = p.mask_queries_only;
        ap.kind = mask_kind(batch[si].rule.kind);
        ap.block_size = static_cast<int>(batch[si].rule.block_size);
        ap.n_q = n;
        ap.max_keys = static_cast<int>(p.max_keys);
        ap.heads = qp.heads;
        ap.kv_heads = qp.kv_heads;
        ap.head_dim = qp.head_dim;
        ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
        ap.splits = splits[si];
        cuda::attention_use_workspace(ap, attn_ws_.get());
        ap.out = attn_.get() + p.row_offset * qd;
        op_begin("attention");
        cuda::attention(ap, stream_);
        op_end();
        if (wants_rows(batch[si])) {
          cuda::AttentionRowsParams rp;
          rp.q = ap.q;
          rp.k_cache = ap.k_cache;
          rp.key_slots = ap.key_slots;
          rp.n_q = n;
          rp.n_keys = static_cast<int>(p.n_keys);
          rp.heads = ap.heads;
          rp.kv_heads = ap.kv_heads;
          rp.head_dim = ap.head_dim;
          rp.width = static_cast<int>(results[si].attention_width);
          rp.scale = ap.scale;
          rp.out = attn_rows_out_.get() + rows_at[si] + static_cast<size_t>(li) * n * rp.width;
          rp.workspace = attn_rows_ws_.get();
          op_begin("attention rows");
          cuda::attention_rows(rp, stream_);
          op_end();
        }
      }
      op_begin("gemm");
      cuda::gemm_nt(cublas_, attn_.get(), L.o.get(), x_.get(), CUDA_R_32F, T, static_cast<int>(h),
                    static_cast<int>(qd), true);
      op_end();
      op_begin("norms");
      cuda::rms_norm(x_.get(), nullptr, L.mlp_norm.get(), xn_.get(), T, static_cast<int>(h), eps,
                     stream_);
      op_end();
      op_begin("gemm");
      cuda::gemm_nt(cublas_, xn_.get(), L.gate_up.get(), gu_.get(), CUDA_R_16BF, T,
                    static_cast<int>(2 * inter), static_cast<int>(h), false);
      op_end();
      op_begin("swiglu");
      cuda::swiglu(gu_.get(), act_.get(), T, static_cast<int>(inter), stream_);
      op_end();
      op_begin("gemm");
      cuda::gemm_nt(cublas_, act_.get(), L.down.get(), x_.get(), CUDA_R_32F, T, static_cast<int>(h),
                    static_cast<int>(inter), true);
      op_end();
    }

    // Final norm + LM head on the wanted rows of every sequence at once.
    if (M > 0) {
      op_begin("norms");
      cuda::rms_norm(x_.get(), d_ints + out_rows_at, final_norm_.get(), hn_.get(), M,
                     static_cast<int>(h), eps, stream_);
      op_end();
      op_begin("lm head gemm");
      cuda::gemm_nt(cublas_, hn_.get(), tied_ ? embed_.get() : lm_head_.get(), logits_.get(),
                    CUDA_R_32F, M, static_cast<int>(c.vocab_size), static_cast<int>(h), false);
      op_end();
    }
    // What comes back: device stats where they suffice, logits rows where a sequence needs them.
    int64_t out_at = 0;
    for (size_t si = 0; si < batch.size(); ++si) {
      const SequenceForward& seq = batch[si];
      const int64_t m = static_cast<int64_t>(seq.output_rows.size());
      const bool host_rows =
          seq.want_logits || (seq.want_stats && !device_stats_suffice(seq.sampler));
      if (m > 0 && seq.want_stats && !host_rows) {
        cuda::BannedTokens ban;
        for (int32_t id : seq.sampler.banned_tokens) ban.ids[ban.n++] = id;
        op_begin("token stats");
        cuda::greedy_token_stats(logits_.get() + out_at * c.vocab_size, static_cast<int>(m),
                                 static_cast<int>(c.vocab_size), ban, stats_.get() + out_at,
                                 stream_);
        op_end();
      }
      out_at += m;
    }
    if (M > 0)
      DLLM_CUDA_CHECK(cudaMemcpyAsync(stats_dst, stats_.get(), M * sizeof(cuda::DeviceTokenStats),
                                      cudaMemcpyDeviceToHost, stream_));
  };  // enqueue

  if (graphable) {
    std::copy(ints.begin(), ints.end(), pinned_ints_.get());
    const SeqPlan& p = plans[0];
    // Everything a captured graph bakes in: buffers (the cache's, by address and capacity) and
    // shape.
    std::string key = std::to_string(reinterpret_cast<uintptr_t>(p.cache->k(0))) + "/" +
                      std::to_string(reinterpret_cast<uintptr_t>(p.cache->v(0))) + "/" +
                      std::to_string(reinterpret_cast<uintptr_t>(p.cache->slot_positions())) + "/" +
                      std::to_string(p.cache->capacity()) + "/" + std::to_string(total) + "/" +
                      std::to_string(M) + "/" + std::to_string(static_cast<int>(s0.rule.kind)) +
                      "/" + std::to_string(s0.rule.block_size) + "/" + std::to_string(p.max_keys);
    for (int32_t id : s0.sampler.banned_tokens) key += "/" + std::to_string(id);
    auto it = graphs_.find(key);
    if (it == graphs_.end() && !seen_shapes_.insert(key).second) {
      // Second time this shape comes: capture it (the first ran directly and warmed everything up).
      cudaGraph_t graph = nullptr;
      DLLM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      enqueue(pinned_ints_.get(), pinned_stats_.get());
      DLLM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      cudaGraphExec_t exec = nullptr;
      DLLM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      cudaGraphDestroy(graph);
      it = graphs_.emplace(key, exec).first;
    }
    if (it != graphs_.end()) {
      DLLM_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
      DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      std::copy(pinned_stats_.get(), pinned_stats_.get() + M, host_stats.begin());
    } else {
      enqueue(pinned_ints_.get(), host_stats.data());
    }
  } else {
    enqueue(ints.data(), host_stats.data());
  }
  // S2D2: verify against the kept draft rows, then keep this forward's rows (in that order: a
  // forward may do both).
  std::vector<std::vector<cuda::DeviceVerifyRow>> device_verify(batch.size());
  std::vector<std::vector<float>> host_verify_kept(batch.size());
  {
    int64_t at = 0;
    for (size_t si = 0; si < batch.size(); ++si) {
      const SequenceForward& seq = batch[si];
      const int64_t m = static_cast<int64_t>(seq.output_rows.size());
      cuda::CudaKvCache* cache = plans[si].cache;
      std::vector<int32_t> in;  // verify inputs, alive until the sync below
      if (seq.verify && m > 0) {
        if (verify_on_device(seq.sampler)) {
          verify_in_.ensure(static_cast<size_t>(3 * m), "verify inputs");
          verify_out_.ensure(static_cast<size_t>(m), "verify outputs");
          in.assign(seq.verify->draft_rows.begin(), seq.verify->draft_rows.end());
          in.insert(in.end(), seq.verify->draft_tokens.begin(), seq.verify->draft_tokens.end());
          for (double u : seq.verify->residual_u) {
            const float f = static_cast<float>(u);
            int32_t bits;
            std::memcpy(&bits, &f, sizeof bits);
            in.push_back(bits);
          }
          DLLM_CUDA_CHECK(cudaMemcpyAsync(verify_in_.get(), in.data(), in.size() * sizeof(int32_t),
                                          cudaMemcpyHostToDevice, stream_));
          cuda::SpanVerifyParams vp;
          vp.q_logits = logits_.get() + at * c.vocab_size;
          vp.kept_logits = cache->kept_logits.get();
          vp.draft_rows = verify_in_.get();
          vp.tokens = verify_in_.get() + m;
          vp.u = reinterpret_cast<const float*>(verify_in_.get() + 2 * m);
          vp.rows = static_cast<int>(m);
          vp.vocab = static_cast<int>(c.vocab_size);
          vp.inv_temperature = seq.sampler.greedy() ? 1.0f : 1.0f / seq.sampler.temperature;
          for (int32_t id : seq.sampler.banned_tokens) vp.banned.ids[vp.banned.n++] = id;
          vp.out = verify_out_.get();
          cuda::span_verify(vp, stream_);
          device_verify[si].resize(static_cast<size_t>(m));
          DLLM_CUDA_CHECK(cudaMemcpyAsync(device_verify[si].data(), verify_out_.get(),
                                          m * sizeof(cuda::DeviceVerifyRow), cudaMemcpyDeviceToHost,
                                          stream_));
        } else {
          // Top-k / top-p: the host functions on the kept rows (the verifier's rows come back
          // below as logits).
          host_verify_kept[si].resize(static_cast<size_t>(cache->kept_rows * c.vocab_size));
          DLLM_CUDA_CHECK(cudaMemcpyAsync(host_verify_kept[si].data(), cache->kept_logits.get(),
                                          host_verify_kept[si].size() * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream_));
        }
        // verify_in_ is reused by the next sequence's copy only after this one's kernel ran.
        DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      }
      if (seq.retain_logits && m > 0) {
        cache->kept_logits.ensure(static_cast<size_t>(m * c.vocab_size), "kept draft logits");
        DLLM_CUDA_CHECK(cudaMemcpyAsync(cache->kept_logits.get(), logits_.get() + at * c.vocab_size,
                                        m * c.vocab_size * sizeof(float), cudaMemcpyDeviceToDevice,
                                        stream_));
        cache->kept_rows = m;
      }
      at += m;
    }
  }
  int64_t out_at = 0;
  for (size_t si = 0; si < batch.size(); ++si) {
    const SequenceForward& seq = batch[si];
    const int64_t m = static_cast<int64_t>(seq.output_rows.size());
    const bool host_rows = seq.want_logits ||
                           (seq.want_stats && !device_stats_suffice(seq.sampler)) ||
                           (seq.verify && !verify_on_device(seq.sampler));
    if (m > 0 && host_rows) {
      results[si].logits.resize(static_cast<size_t>(m * c.vocab_size));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(
          results[si].logits.data(), logits_.get() + out_at * c.vocab_size,
          results[si].logits.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    }
    out_at += m;
  }
  // d2Cache's rollout over the rows just computed; only one value per key slot comes back.
  std::vector<std::vector<float>> importance(batch.size());
  for (size_t si = 0; si < batch.size(); ++si) {
    if (!batch[si].want_attention_rollout) continue;
    const int n = static_cast<int>(batch[si].tokens.size());
    const int width = static_cast<int>(rows_width[si]);
    rollout_ws_.ensure(cuda::attention_rollout_workspace_floats(n, width), "rollout workspace");
    cuda::attention_rollout(attn_rows_out_.get() + rows_at[si], ints_.get() + plans[si].slots_at,
                            static_cast<int>(c.num_layers), n, width, rollout_ws_.get(), stream_);
    importance[si].resize(static_cast<size_t>(width));
    DLLM_CUDA_CHECK(cudaMemcpyAsync(importance[si].data(), rollout_ws_.get(),
                                    importance[si].size() * sizeof(float), cudaMemcpyDeviceToHost,
                                    stream_));
  }
  for (size_t si = 0; si < batch.size(); ++si) {
    if (!batch[si].want_attention_rows) continue;
    results[si].attention_rows.resize(rows_count[si]);
    DLLM_CUDA_CHECK(
        cudaMemcpyAsync(results[si].attention_rows.data(), attn_rows_out_.get() + rows_at[si],
                        rows_count[si] * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }
  DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (profiling_) collect_profile();

  out_at = 0;
  for (size_t si = 0; si < batch.size(); ++si) {
    const SequenceForward& seq = batch[si];
    SeqPlan& p = plans[si];
    for (size_t i = 0; i < p.slots.query_slots.size(); ++i)
      p.cache->set_position(p.slots.query_slots[i], seq.positions[i]);
    if (seq.write == CacheWrite::kAppend) {
      const int64_t committed =
          seq.append_count >= 0 ? seq.append_count : static_cast<int64_t>(seq.tokens.size());
      p.cache->set_length(p.cache->length() + committed);
    }
    const int64_t m = static_cast<int64_t>(seq.output_rows.size());
    if (m > 0 && seq.want_stats) {
      auto& stats = results[si].stats;
      stats.resize(static_cast<size_t>(m));
      if (!results[si].logits.empty()) {
        host_token_stats(c, seq, results[si].logits, stats);
      } else {
        for (int64_t i = 0; i < m; ++i)
          stats[static_cast<size_t>(i)] =
              from_device_stats(host_stats[static_cast<size_t>(out_at + i)]);
      }
    }
    if (seq.want_span_stats && m > 0) {
      if (!results[si].logits.empty()) {
        results[si].span_stats =
            span_stats_on_host(seq, results[si].logits, results[si].stats, c.vocab_size);
      } else {
        const double log_v = std::log(static_cast<double>(c.vocab_size));
        for (int64_t i = 0; i < m; ++i) {
          const cuda::DeviceTokenStats& d = host_stats[static_cast<size_t>(out_at + i)];
          results[si].span_stats.push_back(
              {c.vocab_size > 1 ? d.entropy / log_v : 0.0, d.margin, d.collision, d.p_max});
        }
      }
    }
    if (seq.verify && m > 0) {
      if (!device_verify[si].empty()) {
        for (const cuda::DeviceVerifyRow& d : device_verify[si])
          results[si].verify_rows.push_back({d.q_token, d.p_token, d.residual_token});
      } else {
        results[si].verify_rows = verify_span_rows(results[si].logits, host_verify_kept[si],
                                                   c.vocab_size, *seq.verify, seq.sampler);
      }
    }
    if (seq.want_attention_rollout)
      results[si].attention_importance.assign(importance[si].begin(), importance[si].end());
    if (!seq.want_logits) results[si].logits.clear();
    out_at += m;
  }
  return results;
}

}  // namespace dllm::cuda_backend

namespace dllm {

using cuda_backend::CudaBackend;

std::unique_ptr<Backend> make_cuda_backend(const Model& model, int device) {
  return std::make_unique<CudaBackend>(model, device);
}

bool cuda_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace dllm
