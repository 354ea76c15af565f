// The CUDA forward's outputs: final norm and LM head on the wanted rows of every sequence at
// once, greedy token statistics on the device (only five numbers per row come back), logits
// rows to the host where a sequence needs them; then collect: S2D2's span verification and kept
// draft rows, d2Cache's rollout, and the commit of every written slot.
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.h"
#include "core/thread_pool.h"
#include "decode/s2d2_verify.h"

namespace dllm::cuda_backend {

namespace {

// S2D2 span verification runs on the device for samplers without top-k / top-p (temperature and
// a short banned list are handled there); otherwise on the host from copied rows.
bool verify_on_device(const SamplerConfig& s) {
  return s.top_k == 0 && !(s.top_p < 1.0f) && s.banned_tokens.size() <= cuda::kMaxBanned;
}

TokenStats from_device_stats(const cuda::DeviceTokenStats& d) {
  TokenStats st;
  st.argmax = st.token = d.argmax;
  st.p_max = st.p_token = st.p_token_tempered = st.p_token_raw = d.p_max;
  st.entropy = st.entropy_filtered = d.entropy;
  st.margin = st.margin_filtered = d.margin;
  return st;
}

// Host statistics of the output rows' logits (filters, sampling, LLaDA's per-entry Gumbel
// draws) where the device's greedy statistics do not suffice: one row per thread.
void host_token_stats(const ModelConfig& c, const SequenceForward& seq,
                      const std::vector<float>& logits, std::vector<TokenStats>& stats) {
  const int64_t m = static_cast<int64_t>(seq.output_rows.size());
  parallel_for(m, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const size_t row = static_cast<size_t>(seq.output_rows[static_cast<size_t>(i)]);
      const int32_t pos = seq.rng_positions.empty() ? seq.positions[row]
                                                    : seq.rng_positions[static_cast<size_t>(i)];
      stats[static_cast<size_t>(i)] = compute_token_stats(
          std::span<const float>(logits).subspan(static_cast<size_t>(i * c.vocab_size),
                                                 static_cast<size_t>(c.vocab_size)),
          seq.sampler, seq.rng, pos);
    }
  });
}

}  // namespace

void CudaBackend::enqueue_outputs(ForwardPlan& plan, cuda::DeviceTokenStats* stats_dst) {
  const ModelConfig& c = config_;
  const int M = static_cast<int>(plan.padded_out);
  if (M == 0) return;
  op_begin("norms");
  cuda::rms_norm(x_.get(), ints_.get() + plan.out_rows_at, final_norm_.get(), hn_.get(), M,
                 static_cast<int>(c.hidden_size), static_cast<float>(c.norm_eps), stream_);
  op_end();
  op_begin("lm head gemm");
  cuda::gemm_nt(cublas_, hn_.get(), tied_ ? embed_.get() : lm_head_.get(), logits_.get(),
                CUDA_R_32F, M, static_cast<int>(c.vocab_size), static_cast<int>(c.hidden_size),
                false);
  op_end();
  op_begin("token stats");
  cuda::greedy_token_stats_rows(logits_.get(), M, static_cast<int>(c.vocab_size),
                                ints_.get() + plan.bans_at, ints_.get() + plan.row_ban_at,
                                stats_.get(), stream_);
  op_end();
  DLLM_CUDA_CHECK(cudaMemcpyAsync(stats_dst, stats_.get(), M * sizeof(cuda::DeviceTokenStats),
                                  cudaMemcpyDeviceToHost, stream_));
}

std::vector<SequenceResult> CudaBackend::collect(ForwardPlan& plan,
                                                 std::span<const cuda::DeviceTokenStats> stats) {
  const ModelConfig& c = config_;
  const int64_t V = c.vocab_size;
  std::vector<SequenceResult> results(plan.seqs.size());
  std::vector<std::vector<cuda::DeviceVerifyRow>> device_verify(plan.seqs.size());
  std::vector<std::vector<float>> host_kept(plan.seqs.size()), importance(plan.seqs.size());
  // S2D2: verify against the kept draft rows, then keep this forward's rows (in that order: a
  // forward may do both).
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    const PlannedSequence& p = plan.seqs[si];
    const SequenceForward& seq = *p.seq;
    const int64_t m = static_cast<int64_t>(seq.output_rows.size());
    if (m == 0 || !(seq.verify || seq.retain_logits)) continue;
    auto& st = static_cast<CudaMethodState&>(*seq.state);
    const float* rows = logits_.get() + p.out_offset * V;
    std::vector<int32_t> in;  // verify inputs, alive until the sync below
    if (seq.verify && verify_on_device(seq.sampler)) {
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
      vp.q_logits = rows;
      vp.kept_logits = st.kept_logits.get();
      vp.draft_rows = verify_in_.get();
      vp.tokens = verify_in_.get() + m;
      vp.u = reinterpret_cast<const float*>(verify_in_.get() + 2 * m);
      vp.rows = static_cast<int>(m);
      vp.vocab = static_cast<int>(V);
      vp.inv_temperature = seq.sampler.greedy() ? 1.0f : 1.0f / seq.sampler.temperature;
      for (int32_t id : seq.sampler.banned_tokens) vp.banned.ids[vp.banned.n++] = id;
      vp.out = verify_out_.get();
      cuda::span_verify(vp, stream_);
      device_verify[si].resize(static_cast<size_t>(m));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(device_verify[si].data(), verify_out_.get(),
                                      m * sizeof(cuda::DeviceVerifyRow), cudaMemcpyDeviceToHost,
                                      stream_));
    } else if (seq.verify) {  // top-k / top-p: the host functions on the kept rows
      host_kept[si].resize(static_cast<size_t>(st.kept_rows * V));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(host_kept[si].data(), st.kept_logits.get(),
                                      host_kept[si].size() * sizeof(float), cudaMemcpyDeviceToHost,
                                      stream_));
    }
    // verify_in_ is reused by the next sequence's copy only after this one's kernel ran.
    if (seq.verify) DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (seq.retain_logits) {
      st.kept_logits.ensure(static_cast<size_t>(m * V), "kept draft logits");
      DLLM_CUDA_CHECK(cudaMemcpyAsync(st.kept_logits.get(), rows, m * V * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_));
      st.kept_rows = m;
    }
  }
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    const PlannedSequence& p = plan.seqs[si];
    const int64_t m = static_cast<int64_t>(p.seq->output_rows.size());
    if (m > 0 && p.host_rows) {
      results[si].logits.resize(static_cast<size_t>(m * V));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(results[si].logits.data(), logits_.get() + p.out_offset * V,
                                      results[si].logits.size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream_));
    }
    results[si].attention_width = p.attention_width;
    if (p.seq->want_attention_rollout) {  // only one value per key slot comes back
      const int n = static_cast<int>(p.rows), width = static_cast<int>(p.attention_width);
      rollout_ws_.ensure(cuda::attention_rollout_workspace_floats(n, width), "rollout workspace");
      // The queries' own columns: the last rows of the keys' logical slots.
      const int32_t* query_cols = ints_.get() + p.logical_keys_at + (p.n_keys - p.rows);
      cuda::attention_rollout(attn_rows_out_.get() + p.attn_rows_at, query_cols,
                              static_cast<int>(c.num_layers), n, width, rollout_ws_.get(), stream_);
      importance[si].resize(static_cast<size_t>(width));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(importance[si].data(), rollout_ws_.get(),
                                      importance[si].size() * sizeof(float), cudaMemcpyDeviceToHost,
                                      stream_));
    }
    if (p.seq->want_attention_rows) {
      results[si].attention_rows.resize(p.attn_rows_count);
      DLLM_CUDA_CHECK(
          cudaMemcpyAsync(results[si].attention_rows.data(), attn_rows_out_.get() + p.attn_rows_at,
                          p.attn_rows_count * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    }
  }
  DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (profiling_) collect_profile();

  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    PlannedSequence& p = plan.seqs[si];
    const SequenceForward& seq = *p.seq;
    SequenceResult& r = results[si];
    // Commit: positions of every written slot, and the new length for appends.
    commit_cache_writes(seq, *p.cache, p.query_slots);
    if (p.reuse_first) p.cache->set_length(p.rows);
    const int64_t m = static_cast<int64_t>(seq.output_rows.size());
    if (m > 0 && seq.want_stats) {
      r.stats.resize(static_cast<size_t>(m));
      if (p.host_rows) {
        host_token_stats(c, seq, r.logits, r.stats);
      } else {
        for (int64_t i = 0; i < m; ++i)
          r.stats[static_cast<size_t>(i)] = from_device_stats(stats[size_t(p.out_offset + i)]);
      }
    }
    if (seq.want_span_stats && m > 0) {
      if (p.host_rows) {
        r.span_stats = span_stats_on_host(seq, r.logits, r.stats, V);
      } else {
        const double log_v = std::log(static_cast<double>(V));
        for (int64_t i = 0; i < m; ++i) {
          const cuda::DeviceTokenStats& d = stats[static_cast<size_t>(p.out_offset + i)];
          r.span_stats.push_back({V > 1 ? d.entropy / log_v : 0.0, d.margin, d.collision, d.p_max});
        }
      }
    }
    if (seq.verify && m > 0) {
      if (!device_verify[si].empty()) {
        for (const cuda::DeviceVerifyRow& d : device_verify[si])
          r.verify_rows.push_back({d.q_token, d.p_token, d.residual_token});
      } else {
        r.verify_rows = verify_span_rows(r.logits, host_kept[si], V, *seq.verify, seq.sampler);
      }
    }
    if (seq.want_attention_rollout)
      r.attention_importance.assign(importance[si].begin(), importance[si].end());
    if (seq.sparse) finish_sparse(p, r);
    if (!seq.want_logits) r.logits.clear();
  }
  return results;
}

}  // namespace dllm::cuda_backend
