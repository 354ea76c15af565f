// CUDA backend: construction (weights uploaded once as bf16, q|k|v and gate|up fused into one
// GEMM each), the KV pool's device storage, and what the engine asks of the device.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/weight_upload.h"
#include "core/dtype.h"
#include "model/rope.h"

namespace dllm::cuda_backend {

namespace {

using cuda::upload;
using cuda::upload_bf16;
using cuda::upload_f32;

// Routed experts stacked: [gate_e; up_e] for every e, and down_e for every e.
void upload_experts(const LayerTensors& l, CudaLayer& c) {
  std::vector<const TensorEntry*> gate_up, down;
  for (const FfnTensors& e : l.experts) {
    gate_up.push_back(e.gate);
    gate_up.push_back(e.up);
    down.push_back(e.down);
  }
  c.expert_gate_up = upload_bf16(gate_up, "expert gate/up projections");
  c.expert_down = upload_bf16(down, "expert down projections");
  c.router = upload_bf16({l.router}, "MoE routers");
  if (l.expert_bias) c.expert_bias = upload_f32(l.expert_bias, "MoE expert biases");
}

CudaLayer upload_layer(const LayerTensors& l) {
  CudaLayer c;
  c.attn_norm = upload_bf16({l.attn_norm}, "attention norms");
  // Fused [Q | K | V] checkpoints (LLaDA2.x) already have the layout the GEMM wants.
  c.qkv = l.qkv ? upload_bf16({l.qkv}, "q/k/v projections")
                : upload_bf16({l.q, l.k, l.v}, "q/k/v projections");
  c.o = upload_bf16({l.o}, "output projections");
  c.mlp_norm = upload_bf16({l.mlp_norm}, "MLP norms");
  if (l.router) {
    upload_experts(l, c);
    if (l.shared.gate) {
      c.gate_up = upload_bf16({l.shared.gate, l.shared.up}, "shared expert gate/up projections");
      c.down = upload_bf16({l.shared.down}, "shared expert down projections");
    }
  } else {
    c.gate_up = upload_bf16({l.gate, l.up}, "gate/up projections");
    c.down = upload_bf16({l.down}, "down projections");
  }
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
  return c;
}

}  // namespace

CudaBackend::CudaBackend(const Model& model, int device)
    : config_(model.config()), desc_(describe_layers(model.config())) {
  int count = 0;
  DLLM_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    fail("CUDA device ", device, " does not exist (", count, " found)");
  DLLM_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  DLLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  num_sms_ = prop.multiProcessorCount;
  device_name_ = prop.name;
  // The highest priority: where MAGE's selection runs beside it on a stream of the lowest
  // (cuda_sparse.cpp), a freed SM takes the forward's next block first, so that the selection
  // fills the gaps instead of delaying the forward (alone, priorities change nothing).
  int least = 0, greatest = 0;
  DLLM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  stream_priority_ = greatest;
  lanes_[0].create(stream_priority_);
  DLLM_CUDA_CHECK(cudaEventCreateWithFlags(&lane_fork_, cudaEventDisableTiming));
  DLLM_CUDA_CHECK(cudaEventCreateWithFlags(&lane_join_, cudaEventDisableTiming));
  if (const char* rows = std::getenv("DLLM_FORWARD_OVERLAP_ROWS")) {
    overlap_min_rows_ = std::max<int64_t>(std::atoll(rows), 0);
    overlap_whole_model_ = true;
  }
  graphs_enabled_ = cuda::env_switch_on("DLLM_CUDA_GRAPHS");
  select_side_stream_ = cuda::env_switch_on("DLLM_MAGE_SIDE_STREAM");
  mage_lse_handover_ = cuda::env_switch_on("DLLM_MAGE_LSE_HANDOVER");
  mage_score_handover_ = cuda::env_switch_on("DLLM_MAGE_SCORE_HANDOVER");
  if (const char* rows = std::getenv("DLLM_MAGE_SCORE_ROWS"); rows && std::string(rows) == "16")
    mage_score_rows_ = 16;
  if (const char* slots = std::getenv("DLLM_MAGE_SCORE_SLOTS"))
    score_slots_ = std::clamp(std::atoi(slots), 1, 64);
  if (const char* layers = std::getenv("DLLM_MAGE_TOPK_LAYERS")) {
    top_k_layers_ = std::clamp<int64_t>(std::atoll(layers), 0, 1024);
    top_k_runs_forced_ = true;
  }

  const ModelTensors& t = model.tensors();
  embed_ = upload_bf16({t.embed}, "the embedding");
  final_norm_ = upload_bf16({t.final_norm}, "the final norm");
  tied_ = t.lm_head == t.embed;
  if (!tied_) lm_head_ = upload_bf16({t.lm_head}, "the LM head");
  head_begin_ = model.lm_head_vocab_begin();
  head_rows_ = model.lm_head_vocab_count();
  vocab_slice_ = model.lm_head_is_vocab_slice();
  for (const LayerTensors& l : t.layers) layers_.push_back(upload_layer(l));
  const RopeTable rope = rope_table(config_);  // fp32, as Hugging Face computes it
  inv_freq_ = upload(rope.inv_freq, "RoPE frequencies");
  rope_scale_ = rope.attention_factor;
}

CudaBackend::~CudaBackend() {
  drop_graphs();
  for (ForwardLane& lane : lanes_) lane.release();
  for (cudaEvent_t e : {lane_fork_, lane_join_})
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : select_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : score_slot_events_) cudaEventDestroy(e);
  for (cudaStream_t s : select_streams_) cudaStreamDestroy(s);
}

std::pair<int64_t, int64_t> CudaBackend::device_memory() const {
  size_t free_b = 0, total_b = 0;
  DLLM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return {static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
}

int64_t CudaBackend::activation_bytes(int64_t rows) const {
  const ModelConfig& c = config_;
  const int64_t qkvd = c.q_dim() + 2 * c.kv_dim();
  // x, block outputs and q|k|v in fp32; normed rows, queries, attention, gate|up and the SwiGLU
  // output in bf16; logits of up to 4096 output rows; attention partials and slack.
  int64_t per_row = 4 * (2 * c.hidden_size + qkvd) +
                    2 * (c.hidden_size + 2 * c.q_dim() + 3 * c.intermediate_size);
  if (const MoeConfig& m = c.moe; m.num_experts > 0)  // router logits, then per routed expert:
    per_row += 4 * m.num_experts +                    // routing, gate|up, SwiGLU, output
               m.experts_per_token * (12 + 6 * m.expert_intermediate_size + 4 * c.hidden_size);
  // A batch split over the two forward lanes keeps both halves in lane 0's activations
  // (view_second_half), so a split costs only the halves' padding (within the slack).
  return rows * per_row + std::min<int64_t>(rows, 4096) * c.vocab_size * 4 + (int64_t{1} << 30);
}

int64_t CudaBackend::default_kv_pool_bytes() const {
  // Tests and tools that never sized a pool: a quarter of what is free, at most 8 GiB.
  return std::min<int64_t>(device_memory().first / 4, int64_t{8} << 30);
}

void CudaBackend::allocate_kv_storage(int64_t num_slots) {
  const size_t n =
      static_cast<size_t>(config_.num_layers * (num_slots + kExtraSlots) * config_.kv_dim());
  k_pool_.resize(n, "the KV pool (K)");
  v_pool_.resize(n, "the KV pool (V)");
  pool_positions_.resize(static_cast<size_t>(num_slots + kExtraSlots),
                         "the KV pool's slot positions");
  pool_slots_ = num_slots;
  // The masked slot: finite K / V (a masked score times V must stay 0) at a position past every
  // query, which the block-causal rule masks (Quest uses it under that rule only).
  const size_t row_bytes = static_cast<size_t>(config_.kv_dim()) * sizeof(bf16);
  for (int64_t l = 0; l < config_.num_layers; ++l)
    for (bf16* base : {k_pool(l), v_pool(l)})
      DLLM_CUDA_CHECK(cudaMemset(base + masked_slot() * config_.kv_dim(), 0, row_bytes));
  const int32_t never = INT32_MAX;
  DLLM_CUDA_CHECK(cudaMemcpy(pool_positions_.get() + masked_slot(), &never, sizeof(never),
                             cudaMemcpyHostToDevice));
  drop_graphs();
}

void CudaBackend::copy_kv_pages(std::span<const std::pair<int32_t, int32_t>> copies) {
  const int64_t ps = kv_pool().page_size(), kvd = config_.kv_dim();
  const size_t bytes = static_cast<size_t>(ps * kvd) * sizeof(bf16);
  for (const auto& [from, to] : copies) {
    for (int64_t l = 0; l < config_.num_layers; ++l)
      for (bf16* base : {k_pool(l), v_pool(l)})
        DLLM_CUDA_CHECK(cudaMemcpyAsync(base + to * ps * kvd, base + from * ps * kvd, bytes,
                                        cudaMemcpyDeviceToDevice, lane_->stream));
    DLLM_CUDA_CHECK(cudaMemcpyAsync(pool_positions_.get() + to * ps,
                                    pool_positions_.get() + from * ps, ps * sizeof(int32_t),
                                    cudaMemcpyDeviceToDevice, lane_->stream));
  }
}

void CudaBackend::fill_cache_random(KvCache& cache, int64_t n, uint64_t seed) {
  cache.reserve(n);
  const int64_t ps = cache.page_size(), kvd = config_.kv_dim();
  const auto pages = cache.pages();
  std::vector<int32_t> positions(static_cast<size_t>(ps));
  for (size_t p = 0; p * ps < static_cast<size_t>(n); ++p) {
    const int64_t slot0 = static_cast<int64_t>(pages[p]) * ps;
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      cuda::fill_random_bf16(k_pool(l) + slot0 * kvd, ps * kvd, seed + 2 * l + 7919 * p,
                             lane_->stream);
      cuda::fill_random_bf16(v_pool(l) + slot0 * kvd, ps * kvd, seed + 2 * l + 1 + 7919 * p,
                             lane_->stream);
    }
    for (int64_t i = 0; i < ps; ++i) positions[size_t(i)] = static_cast<int32_t>(p * ps + i);
    DLLM_CUDA_CHECK(cudaMemcpyAsync(pool_positions_.get() + slot0, positions.data(),
                                    ps * sizeof(int32_t), cudaMemcpyHostToDevice, lane_->stream));
    DLLM_CUDA_CHECK(cudaStreamSynchronize(lane_->stream));  // `positions` is reused
  }
  for (int64_t s = 0; s < n; ++s) cache.set_position(s, static_cast<int32_t>(s));
  cache.set_length(n);
}

void CudaBackend::op_begin(const char* op) {
  if (!profiling_) return;
  OpEvents e{op, nullptr, nullptr};
  DLLM_CUDA_CHECK(cudaEventCreate(&e.start));
  DLLM_CUDA_CHECK(cudaEventCreate(&e.stop));
  DLLM_CUDA_CHECK(cudaEventRecord(e.start, lane_->stream));
  events_.push_back(e);
}

void CudaBackend::op_end() {
  if (profiling_) DLLM_CUDA_CHECK(cudaEventRecord(events_.back().stop, lane_->stream));
}

void CudaBackend::add_profile(const std::string& op, double ms) {
  auto it =
      std::find_if(profile_.begin(), profile_.end(), [&](const auto& p) { return p.first == op; });
  if (it == profile_.end()) {
    profile_.emplace_back(op, ms);
  } else {
    it->second += ms;
  }
}

void CudaBackend::set_profiling(bool on) {
  profiling_ = on;
  profile_.clear();
  moe_touched_ = {};
}

std::optional<double> CudaBackend::profiled_moe_experts_touched() const {
  return moe_touched_.average();
}

void CudaBackend::count_moe_touched() {
  int32_t used = 0;  // the work list's count of experts with rows
  DLLM_CUDA_CHECK(cudaMemcpyAsync(&used, lane_->moe_work.get() + 1, sizeof(used),
                                  cudaMemcpyDeviceToHost, lane_->stream));
  DLLM_CUDA_CHECK(cudaStreamSynchronize(lane_->stream));
  moe_touched_.add(used);
}

void CudaBackend::collect_profile() {
  for (auto& e : events_) {
    float ms = 0;
    DLLM_CUDA_CHECK(cudaEventElapsedTime(&ms, e.start, e.stop));
    add_profile(e.op, ms);
    cudaEventDestroy(e.start);
    cudaEventDestroy(e.stop);
  }
  events_.clear();
}

void CudaBackend::drop_graphs() {
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
}

}  // namespace dllm::cuda_backend

namespace dllm {

std::unique_ptr<Backend> make_cuda_backend(const Model& model, int device) {
  return std::make_unique<cuda_backend::CudaBackend>(model, device);
}

bool cuda_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace dllm
