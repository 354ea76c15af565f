// The CUDA backend's class, shared by its source files (cuda_backend.cpp: construction and the
// batched forward; cuda_dllm_cache.cpp: dLLM-Cache steps). Internal to src/backend/cuda.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kv_cache.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/sequence_slots.h"
#include "core/dtype.h"

namespace dllm::cuda_backend {

using cuda::bf16;
using cuda::DeviceBuffer;

// bf16 host copy of checkpoint tensors (concatenated along rows).
inline std::vector<uint16_t> to_bf16(std::initializer_list<const TensorEntry*> parts) {
  size_t n = 0;
  for (const TensorEntry* t : parts) n += static_cast<size_t>(t->numel());
  std::vector<uint16_t> out(n);
  size_t at = 0;
  for (const TensorEntry* t : parts) {
    const size_t cnt = static_cast<size_t>(t->numel());
    if (*t->dtype == DType::kBF16) {
      std::memcpy(&out[at], t->data, cnt * 2);
    } else {
      std::vector<float> f(cnt);
      convert_to_f32(*t->dtype, t->data, f.data(), cnt);
      for (size_t i = 0; i < cnt; ++i) out[at + i] = f32_to_bf16(f[i]);
    }
    at += cnt;
  }
  return out;
}

template <class T>
inline DeviceBuffer<T> upload(const std::vector<T>& host, const char* what) {
  DeviceBuffer<T> d(host.size(), what);
  DLLM_CUDA_CHECK(
      cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

inline DeviceBuffer<bf16> upload_bf16(std::initializer_list<const TensorEntry*> parts,
                                      const char* what) {
  const auto host = to_bf16(parts);
  DeviceBuffer<bf16> d(host.size(), what);
  DLLM_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

struct CudaLayer {
  DeviceBuffer<bf16> attn_norm, qkv, o, mlp_norm, gate_up, down, q_norm, k_norm;
  DeviceBuffer<float> qkv_bias;
};

inline cuda::MaskKind mask_kind(AttentionKind k) {
  switch (k) {
    case AttentionKind::kCausal:
      return cuda::MaskKind::kCausal;
    case AttentionKind::kBidirectional:
      return cuda::MaskKind::kBidirectional;
    case AttentionKind::kBlockCausal:
      return cuda::MaskKind::kBlockCausal;
    case AttentionKind::kCustom:
      return cuda::MaskKind::kCustom;
  }
  return cuda::MaskKind::kCausal;
}

// Device TokenStats are enough for greedy decoding without filters (greedy Gumbel-max is the
// argmax too) and without confidence-banned tokens.
inline bool device_stats_suffice(const SamplerConfig& s) {
  return s.greedy() && s.top_k == 0 && !(s.top_p < 1.0f) &&
         s.banned_tokens.size() <= cuda::kMaxBanned && s.confidence_banned_tokens.empty();
}

// S2D2 span verification runs on the device for samplers without top-k / top-p (temperature and
// a short banned list are handled there); otherwise on the host from copied rows.
inline bool verify_on_device(const SamplerConfig& s) {
  return s.top_k == 0 && !(s.top_p < 1.0f) && s.banned_tokens.size() <= cuda::kMaxBanned;
}

// Head-averaged attention rows are computed on the device for themselves or for the rollout.
inline bool wants_rows(const SequenceForward& s) {
  return s.want_attention_rows || s.want_attention_rollout;
}

// TokenStats of one output row from the device's greedy statistics.
inline TokenStats from_device_stats(const cuda::DeviceTokenStats& d) {
  TokenStats st;
  st.argmax = st.token = d.argmax;
  st.p_max = st.p_token = st.p_token_tempered = st.p_token_raw = d.p_max;
  st.entropy = st.entropy_filtered = d.entropy;
  st.margin = st.margin_filtered = d.margin;
  return st;
}

// Host statistics of the output rows' logits (filters, sampling, LLaDA's per-entry Gumbel
// draws) where the device's greedy statistics do not suffice: one row per thread.
inline void host_token_stats(const ModelConfig& c, const SequenceForward& seq,
                             const std::vector<float>& logits, std::vector<TokenStats>& stats) {
  const int64_t m = static_cast<int64_t>(seq.output_rows.size());
#pragma omp parallel for if (m > 1)
  for (int64_t i = 0; i < m; ++i) {
    const size_t row = static_cast<size_t>(seq.output_rows[static_cast<size_t>(i)]);
    const int32_t pos =
        seq.rng_positions.empty() ? seq.positions[row] : seq.rng_positions[static_cast<size_t>(i)];
    stats[static_cast<size_t>(i)] = compute_token_stats(
        std::span<const float>(logits).subspan(static_cast<size_t>(i * c.vocab_size),
                                               static_cast<size_t>(c.vocab_size)),
        seq.sampler, seq.rng, pos);
  }
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Model& model, int device) : config_(model.config()) {
    int count = 0;
    DLLM_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count)
      fail("CUDA device ", device, " does not exist (", count, " found)");
    DLLM_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    DLLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    num_sms_ = prop.multiProcessorCount;
    device_name_ = prop.name;
    DLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DLLM_CUBLAS_CHECK(cublasCreate(&cublas_));
    DLLM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // A workspace of our own keeps cuBLAS from allocating while a graph is being captured.
    cublas_workspace_.resize(size_t(32) << 20, "the cuBLAS workspace");
    DLLM_CUBLAS_CHECK(
        cublasSetWorkspace(cublas_, cublas_workspace_.get(), cublas_workspace_.size()));
    graphs_enabled_ = cuda::env_switch_on("DLLM_CUDA_GRAPHS");

    const ModelTensors& t = model.tensors();
    embed_ = upload_bf16({t.embed}, "the embedding");
    final_norm_ = upload_bf16({t.final_norm}, "the final norm");
    tied_ = t.lm_head == t.embed;
    if (!tied_) lm_head_ = upload_bf16({t.lm_head}, "the LM head");
    for (const LayerTensors& l : t.layers) {
      CudaLayer c;
      c.attn_norm = upload_bf16({l.attn_norm}, "attention norms");
      c.qkv = upload_bf16({l.q, l.k, l.v}, "q/k/v projections");
      c.o = upload_bf16({l.o}, "output projections");
      c.mlp_norm = upload_bf16({l.mlp_norm}, "MLP norms");
      c.gate_up = upload_bf16({l.gate, l.up}, "gate/up projections");
      c.down = upload_bf16({l.down}, "down projections");
      if (l.q_norm) {
        c.q_norm = upload_bf16({l.q_norm}, "q norms");
        c.k_norm = upload_bf16({l.k_norm}, "k norms");
      }
      if (l.q_bias) {
        std::vector<float> bias;
        for (const TensorEntry* b : {l.q_bias, l.k_bias, l.v_bias}) {
          std::vector<float> f(static_cast<size_t>(b->numel()));
          convert_to_f32(*b->dtype, b->data, f.data(), f.size());
          bias.insert(bias.end(), f.begin(), f.end());
        }
        c.qkv_bias = upload(bias, "q/k/v biases");
      }
      layers_.push_back(std::move(c));
    }
    std::vector<float> inv(static_cast<size_t>(config_.rotary_dim / 2));
    for (int64_t i = 0; i < config_.rotary_dim / 2; ++i)  // fp32, as Hugging Face computes it
      inv[static_cast<size_t>(i)] =
          1.0f / std::pow(static_cast<float>(config_.rope_theta),
                          static_cast<float>(2 * i) / static_cast<float>(config_.rotary_dim));
    inv_freq_ = upload(inv, "RoPE frequencies");
  }

  ~CudaBackend() override {
    drop_graphs();
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda (" + device_name_ + ")"; }

  std::unique_ptr<KvCache> create_cache(int64_t capacity) override {
    return std::make_unique<cuda::CudaKvCache>(config_.num_layers, config_.kv_dim(), capacity,
                                               stream_);
  }

  std::vector<SequenceResult> forward(std::span<const SequenceForward> batch) override;
  // One dLLM-Cache step (forward() hands it over; cuda_dllm_cache.cpp).
  SequenceResult forward_dllm_cache(const SequenceForward& seq);

  void fill_cache_random(KvCache& kv, int64_t n, uint64_t seed) override {
    auto* cache = dynamic_cast<cuda::CudaKvCache*>(&kv);
    if (!cache) fail("fill_cache_random: the cache was not created by the CUDA backend");
    cache->reserve(n);
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      cuda::fill_random_bf16(cache->k(l), n * config_.kv_dim(), seed + 2 * l, stream_);
      cuda::fill_random_bf16(cache->v(l), n * config_.kv_dim(), seed + 2 * l + 1, stream_);
    }
    cuda::fill_iota(cache->slot_positions(), n, stream_);
    DLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int64_t s = 0; s < n; ++s) cache->set_position(s, static_cast<int32_t>(s));
    cache->set_length(n);
  }

  void set_profiling(bool on) override {
    profiling_ = on;
    profile_.clear();
  }
  std::vector<std::pair<std::string, double>> profile() const override { return profile_; }

 private:
  // Profiling: events around each op class, summed per class after the forward's sync.
  struct OpEvents {
    std::string op;
    cudaEvent_t start, stop;
  };
  void op_begin(const char* op) {
    if (!profiling_) return;
    OpEvents e{op, nullptr, nullptr};
    DLLM_CUDA_CHECK(cudaEventCreate(&e.start));
    DLLM_CUDA_CHECK(cudaEventCreate(&e.stop));
    DLLM_CUDA_CHECK(cudaEventRecord(e.start, stream_));
    events_.push_back(e);
  }
  void op_end() {
    if (profiling_) DLLM_CUDA_CHECK(cudaEventRecord(events_.back().stop, stream_));
  }
  void collect_profile() {
    for (auto& e : events_) {
      float ms = 0;
      DLLM_CUDA_CHECK(cudaEventElapsedTime(&ms, e.start, e.stop));
      auto it = std::find_if(profile_.begin(), profile_.end(),
                             [&](const auto& p) { return p.first == e.op; });
      if (it == profile_.end()) {
        profile_.emplace_back(e.op, ms);
      } else {
        it->second += ms;
      }
      cudaEventDestroy(e.start);
      cudaEventDestroy(e.stop);
    }
    events_.clear();
  }
  void drop_graphs() {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }
  bool graphs_enabled_ = true;  // DLLM_CUDA_GRAPHS=0 turns capture off (debugging, comparisons)
  std::map<std::string, cudaGraphExec_t> graphs_;
  std::set<std::string> seen_shapes_;
  cuda::PinnedBuffer<int32_t> pinned_ints_;
  cuda::PinnedBuffer<cuda::DeviceTokenStats> pinned_stats_;
  DeviceBuffer<char> cublas_workspace_;

  bool profiling_ = false;
  std::vector<OpEvents> events_;
  std::vector<std::pair<std::string, double>> profile_;

  struct SeqPlan {
    cuda::CudaKvCache* cache = nullptr;
    std::unique_ptr<cuda::CudaKvCache> owned;
    SequenceSlots slots;
    int64_t row_offset = 0;
    int64_t n_keys = 0;
    int64_t max_keys = 0;  // the attention grid covers this many keys (> n_keys in captured graphs)
    size_t slots_at = 0, keys_at = 0, nkeys_at = 0,
           mask_at = 0;  // offsets into the staging buffers
    bool has_mask = false;
    bool mask_queries_only = false;  // the mask covers [queries x queries]; the cache is visible
  };

  ModelConfig config_;
  int num_sms_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer<bf16> embed_, final_norm_, lm_head_;
  bool tied_ = false;
  std::vector<CudaLayer> layers_;
  DeviceBuffer<float> inv_freq_;

  // Activations and staging, grown to the largest forward seen.
  DeviceBuffer<float> x_, qkv_, attn_ws_, attn_rows_ws_, attn_rows_out_, logits_;
  DeviceBuffer<bf16> xn_, q_, attn_, gu_, act_, hn_;
  DeviceBuffer<int32_t> ints_;
  DeviceBuffer<uint8_t> masks_;
  DeviceBuffer<cuda::DeviceTokenStats> stats_;
  DeviceBuffer<float> dlc_out_, dlc_sim_;  // dLLM-Cache: o_proj / FFN rows, V similarities
  DeviceBuffer<float> rollout_ws_;         // d2Cache rollout: importance first, then scratch
  DeviceBuffer<int32_t> verify_in_;        // S2D2 verify: draft rows | tokens | uniforms (bits)
  DeviceBuffer<cuda::DeviceVerifyRow> verify_out_;
};

}  // namespace dllm::cuda_backend
