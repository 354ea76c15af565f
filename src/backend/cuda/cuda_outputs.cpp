// The CUDA forward's outputs: final norm and LM head on the wanted rows of every sequence at
// once, greedy softmax sums on the device (only six numbers per row come back), logits rows to
// the host where a sequence needs them; then collect: S2D2's span verification and kept
// draft rows, d2Cache's rollout, and the commit of every written slot.
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.h"
#include "backend/host_token_stats.h"
#include "core/thread_pool.h"
#include "decode/s2d2_verify.h"

namespace dllm::cuda_backend {

namespace {

// S2D2 span verification runs on the device for samplers without top-k / top-p (temperature and
// a short banned list are handled there); otherwise on the host from copied rows.
bool verify_on_device(const SamplerConfig& s) {
  return s.top_k == 0 && !(s.top_p < 1.0f) && s.banned_tokens.size() <= cuda::kMaxBanned;
}

// The device's greedy statistics of a whole-vocabulary row: the one slice's sums, finished.
TokenStats from_device_sums(const cuda::DeviceRowSums& d, const SamplerConfig& sampler) {
  const VocabShardPartial whole = cuda::row_sums_partial(d, 0);
  return merge_vocab_shards(std::span(&whole, 1), sampler, {});
}

}  // namespace

void CudaBackend::enqueue_outputs(ForwardPlan& plan, cuda::DeviceRowSums* stats_dst) {
  const ModelConfig& c = config_;
  const int M = static_cast<int>(plan.padded_out);
  if (M == 0) return;
  op_begin("norms");
  cuda::rms_norm(lane_->x.get(), lane_->ints.get() + plan.out_rows_at, final_norm_.get(),
                 lane_->hn.get(), M, static_cast<int>(c.hidden_size),
                 static_cast<float>(c.norm_eps), lane_->stream);
  op_end();
  op_begin("lm head gemm");
  cuda::gemm_nt(lane_->cublas, lane_->hn.get(), tied_ ? embed_.get() : lm_head_.get(),
                lane_->logits.get(), CUDA_R_32F, M, static_cast<int>(head_rows_),
                static_cast<int>(c.hidden_size), false);
  op_end();
  op_begin("token stats");
  cuda::greedy_row_sums_rows(lane_->logits.get(), M, static_cast<int>(head_rows_),
                             static_cast<int>(head_begin_), lane_->ints.get() + plan.bans_at,
                             lane_->ints.get() + plan.row_ban_at, lane_->stats.get(),
                             lane_->stream);
  op_end();
  DLLM_CUDA_CHECK(cudaMemcpyAsync(stats_dst, lane_->stats.get(), M * sizeof(cuda::DeviceRowSums),
                                  cudaMemcpyDeviceToHost, lane_->stream));
}

std::vector<SequenceResult> CudaBackend::collect(ForwardPlan& plan,
                                                 std::span<const cuda::DeviceRowSums> stats) {
  const ModelConfig& c = config_;
  const int64_t V = head_rows_;  // the logits rows' width: the vocabulary, or a rank's slice
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
    const float* rows = lane_->logits.get() + p.out_offset * V;
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
                                      cudaMemcpyHostToDevice, lane_->stream));
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
      cuda::span_verify(vp, lane_->stream);
      device_verify[si].resize(static_cast<size_t>(m));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(device_verify[si].data(), verify_out_.get(),
                                      m * sizeof(cuda::DeviceVerifyRow), cudaMemcpyDeviceToHost,
                                      lane_->stream));
    } else if (seq.verify) {  // top-k / top-p: the host functions on the kept rows
      host_kept[si].resize(static_cast<size_t>(st.kept_rows * V));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(host_kept[si].data(), st.kept_logits.get(),
                                      host_kept[si].size() * sizeof(float), cudaMemcpyDeviceToHost,
                                      lane_->stream));
    }
    // verify_in_ is reused by the next sequence's copy only after this one's kernel ran.
    if (seq.verify) DLLM_CUDA_CHECK(cudaStreamSynchronize(lane_->stream));
    if (seq.retain_logits) {
      st.kept_logits.ensure(static_cast<size_t>(m * V), "kept draft logits");
      DLLM_CUDA_CHECK(cudaMemcpyAsync(st.kept_logits.get(), rows, m * V * sizeof(float),
                                      cudaMemcpyDeviceToDevice, lane_->stream));
      st.kept_rows = m;
    }
  }
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    const PlannedSequence& p = plan.seqs[si];
    const int64_t m = static_cast<int64_t>(p.seq->output_rows.size());
    if (m > 0 && p.host_rows) {
      results[si].logits.resize(static_cast<size_t>(m * V));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(
          results[si].logits.data(), lane_->logits.get() + p.out_offset * V,
          results[si].logits.size() * sizeof(float), cudaMemcpyDeviceToHost, lane_->stream));
    }
    results[si].attention_width = p.attention_width;
    if (p.seq->want_attention_rollout) {  // only one value per key slot comes back
      const int n = static_cast<int>(p.rows), width = static_cast<int>(p.attention_width);
      rollout_ws_.ensure(cuda::attention_rollout_workspace_floats(n, width), "rollout workspace");
      // The queries' own columns: the last rows of the keys' logical slots.
      const int32_t* query_cols = lane_->ints.get() + p.logical_keys_at + (p.n_keys - p.rows);
      cuda::attention_rollout(attn_rows_out_.get() + p.attn_rows_at, query_cols,
                              static_cast<int>(c.num_layers), n, width, rollout_ws_.get(),
                              lane_->stream);
      importance[si].resize(static_cast<size_t>(width));
      DLLM_CUDA_CHECK(cudaMemcpyAsync(importance[si].data(), rollout_ws_.get(),
                                      importance[si].size() * sizeof(float), cudaMemcpyDeviceToHost,
                                      lane_->stream));
    }
    if (p.seq->want_attention_rows) {
      results[si].attention_rows.resize(p.attn_rows_count);
      DLLM_CUDA_CHECK(cudaMemcpyAsync(
          results[si].attention_rows.data(), attn_rows_out_.get() + p.attn_rows_at,
          p.attn_rows_count * sizeof(float), cudaMemcpyDeviceToHost, lane_->stream));
    }
  }
  DLLM_CUDA_CHECK(cudaStreamSynchronize(lane_->stream));
  if (profiling_) collect_profile();

  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    PlannedSequence& p = plan.seqs[si];
    const SequenceForward& seq = *p.seq;
    SequenceResult& r = results[si];
    // Commit: positions of every written slot, and the new length for appends.
    commit_cache_writes(seq, *p.cache, p.query_slots);
    if (p.reuse_first) p.cache->set_length(p.rows);
    const int64_t m = static_cast<int64_t>(seq.output_rows.size());
    if (vocab_slice_) {  // the group merges: device rows' partial sums, or the logits slices
      if (m > 0 && seq.want_stats && !p.host_rows)
        for (int64_t i = 0; i < m; ++i)
          r.vocab_partials.push_back(cuda::row_sums_partial(stats[size_t(p.out_offset + i)],
                                                            static_cast<int32_t>(head_begin_)));
    } else {
      whole_vocab_outputs(p, stats, device_verify[si], host_kept[si], r);
    }
    if (seq.want_attention_rollout)
      r.attention_importance.assign(importance[si].begin(), importance[si].end());
    if (seq.sparse) finish_sparse(p, r);
    if (!seq.want_logits && !vocab_slice_) r.logits.clear();
  }
  for (size_t si = 0; si < plan.routing.size(); ++si) {
    results[si].routed_experts = std::move(plan.routing[si].routed_experts);
    results[si].routing_gaps = std::move(plan.routing[si].routing_gaps);
  }
  return results;
}

void CudaBackend::whole_vocab_outputs(const PlannedSequence& p,
                                      std::span<const cuda::DeviceRowSums> stats,
                                      std::span<const cuda::DeviceVerifyRow> device_verify,
                                      std::span<const float> host_kept, SequenceResult& r) const {
  const SequenceForward& seq = *p.seq;
  const int64_t V = head_rows_;
  const int64_t m = static_cast<int64_t>(seq.output_rows.size());
  if (m == 0) return;
  if (seq.want_stats) {
    if (p.host_rows) {
      r.stats = token_stats_on_host(seq, r.logits, V);
    } else {
      for (int64_t i = 0; i < m; ++i)
        r.stats.push_back(from_device_sums(stats[size_t(p.out_offset + i)], seq.sampler));
    }
  }
  if (seq.want_span_stats) {
    if (p.host_rows) {
      r.span_stats = span_stats_on_host(seq, r.logits, r.stats, V);
    } else {
      for (int64_t i = 0; i < m; ++i) {
        const VocabShardPartial whole = cuda::row_sums_partial(stats[size_t(p.out_offset + i)], 0);
        r.span_stats.push_back(
            greedy_span_stats(r.stats[size_t(i)], merged_collision(std::span(&whole, 1)), V));
      }
    }
  }
  if (seq.verify) {
    if (!device_verify.empty()) {
      for (const cuda::DeviceVerifyRow& d : device_verify)
        r.verify_rows.push_back({d.q_token, d.p_token, d.residual_token});
    } else {
      r.verify_rows = verify_span_rows(r.logits, host_kept, V, *seq.verify, seq.sampler);
    }
  }
}

}  // namespace dllm::cuda_backend
