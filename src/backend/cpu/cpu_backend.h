// The CPU backend's class, shared by its source files (internal to src/backend/cpu):
//   cpu_backend.cpp   weights, KV storage, the one forward over a batch (layer by layer)
//   cpu_outputs.cpp   final norm, LM head, TokenStats, S2D2's kept rows and verification
//   cpu_dllm_cache.cpp dLLM-Cache's per-layer reuse, an option of that forward
//   cpu_sparse.cpp    sparse attention's selection and gathered attention (MAGE, Quest, SparseD)
// fp32 compute; weight matrices stay in the checkpoint's dtype where they lie (cpu_weight.h: bf16 /
// f16 widened in the GEMM's registers, nothing copied); the GEMMs run over the rows of every
// sequence at once, attention per sequence over its K/V pages.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_weight.h"
#include "backend/moe_routing.h"
#include "core/host_tensor.h"
#include "model/layer_desc.h"

namespace dllm::cpu_backend {

// One SwiGLU FFN's weights.
struct CpuFfn {
  cpu::WeightMatrix gate, up, down;
};

// A mixture-of-experts FFN (cpu_moe.cpp): router, selection bias (may be empty), experts, shared
// experts (empty without them).
struct CpuMoe {
  cpu::WeightMatrix router;
  HostTensor expert_bias;
  std::vector<CpuFfn> experts;
  CpuFfn shared;
};

// q, k, v are separate even when the checkpoint fuses them (row views of the fused weight: the
// GEMMs are the same). Norm weights and biases are fp32 copies (tiny, read elementwise).
struct CpuLayer {
  HostTensor attn_norm;
  cpu::WeightMatrix q, k, v, o;
  HostTensor q_bias, k_bias, v_bias, q_norm, k_norm, mlp_norm;
  CpuFfn ffn;  // dense layers
  CpuMoe moe;  // FfnKind::kMoeSwiGlu layers
};

// out[rows, hidden] = down(silu(gate(x)) * up(x)); `gate` / `up` are scratch.
void swiglu_ffn(const CpuFfn& w, const float* x, int64_t rows, int64_t hidden, float* out,
                std::vector<float>& gate, std::vector<float>& up);

// out[m, hidden] = the MoE FFN of `m` normed rows `xn` (router, top-k experts, shared experts).
// Each row's result depends only on that row (batch invariant).
// `routing` (may be null): receives how the m rows were routed (SequenceForward::want_routing).
// Returns the number of held experts some row was routed to.
int64_t moe_ffn(const MoeConfig& config, const CpuMoe& weights, const float* xn, int64_t m,
                int64_t hidden, float* out, MoeRoutingReport* routing = nullptr);

// What the CPU keeps per sequence between forwards.
class CpuMethodState final : public MethodState {
 public:
  // S2D2: the draft forward's output-row logits (retain_logits), vocab each.
  std::vector<float> kept_logits;
  // dLLM-Cache: per layer, the attention output (after o_proj) and the FFN output of every canvas
  // row, [layer][row * hidden]; empty until the first dLLM-Cache forward.
  std::vector<std::vector<float>> attn_out, ffn_out;
  // Sparse attention: the stored index sets, [layer * num_kv_heads + kv_head]; empty until the
  // first selection (attention/sparse_attention.h).
  std::vector<SparseSet> sparse_sets;
};

// One sequence of a forward: where its rows sit in the batch and its keys in the pool.
struct SequenceRun {
  const SequenceForward* seq = nullptr;
  KvCache* cache = nullptr;
  std::unique_ptr<KvCache> owned;    // cache-less requests get a scratch cache
  std::vector<int32_t> query_slots;  // logical slot of each query's fresh K/V
  std::vector<int32_t> key_slots;    // logical slots of the keys: [visible entries | queries]
  std::vector<uint8_t> visible;      // [n_q, n_keys]
  int64_t row_offset = 0;            // first row of this sequence in the batch
  int64_t rows = 0;
  // Rows recomputed in the current layer (indices into the sequence's rows): every row, except
  // under dLLM-Cache's reuse.
  std::vector<int32_t> active;
  // dLLM-Cache: this forward fills an empty cache (computes and keeps everything).
  bool reuse_first = false;
};

class CpuBackend : public Backend {  // not final: tests override check_forward()
 public:
  explicit CpuBackend(const Model& model);

  std::string name() const override { return "cpu"; }
  int64_t kv_bytes_per_slot() const override {
    return 2 * config_.num_layers * config_.kv_dim() * static_cast<int64_t>(sizeof(float));
  }
  std::unique_ptr<MethodState> create_method_state() override {
    return std::make_unique<CpuMethodState>();
  }
  std::vector<SequenceResult> forward(std::span<const SequenceForward> batch) override;
  void fill_cache_random(KvCache& cache, int64_t n, uint64_t seed) override;
  // Benchmarks: the CPU keeps no per-op times, only the MoE layers' experts with rows (the floor
  // of `dllm bench` counts their weights).
  void set_profiling(bool on) override;
  std::optional<double> profiled_moe_experts_touched() const override;

  // Tensor parallel (a rank of Model::shard): sums a block's partial output rows [count floats]
  // over the group in place, after the o and the down projection. Unset for a whole model.
  using PartialSumReduce = std::function<void(float* rows, int64_t count)>;
  void set_partial_sum_reduce(PartialSumReduce reduce) { reduce_ = std::move(reduce); }

  // K / V row of a physical pool slot (tests read the pool through these).
  float* k_row(int64_t layer, int64_t physical_slot) {
    return k_[static_cast<size_t>(layer)].get() + physical_slot * config_.kv_dim();
  }
  float* v_row(int64_t layer, int64_t physical_slot) {
    return v_[static_cast<size_t>(layer)].get() + physical_slot * config_.kv_dim();
  }

 protected:
  void allocate_kv_storage(int64_t num_slots) override;
  void copy_kv_pages(std::span<const std::pair<int32_t, int32_t>> copies) override;
  int64_t default_kv_pool_bytes() const override { return int64_t{1} << 29; }

 private:
  SequenceRun plan_run(const SequenceForward& seq, size_t index);
  // Q/K/V projections (+ bias, q/k-norm, RoPE at `positions`) of `rows` normed rows; null
  // outputs are skipped (V needs no positions).
  void project_qkv(const CpuLayer& L, const float* xn, int64_t rows,
                   std::span<const int32_t> positions, float* q, float* k, float* v) const;
  // Attention of the active rows of one sequence; `q` / `out` hold those rows only.
  void attend(int64_t layer, SequenceRun& run, const float* q, float* out,
              SequenceResult& result) const;
  // Exact attention of the active rows over the keys krows / vrows (run.key_slots' rows).
  void attend_exact(int64_t layer, SequenceRun& run, std::span<const float* const> krows,
                    std::span<const float* const> vrows, const float* q, float* out,
                    SequenceResult& result) const;
  // want_layer_qk (cpu_sparse_prefill.cpp): this layer's query rows and the queries' own keys.
  void keep_layer_qk(int64_t layer, const SequenceRun& run, std::span<const float* const> krows,
                     const float* q, SequenceResult& result) const;
  // MMInference sparse prefill (cpu_sparse_prefill.cpp): false, attending nothing, when the
  // forward is not a prefill from position 0 or every head of the layer is dense.
  bool attend_sparse_prefill(int64_t layer, const SequenceRun& run,
                             std::span<const float* const> krows,
                             std::span<const float* const> vrows, const float* q, float* out) const;
  // Sparse attention (cpu_sparse.cpp): selects into the method state and/or attends the prefix
  // through its sets, per KV head; exact attention when the step attends no sets.
  void attend_sparse(int64_t layer, SequenceRun& run, std::span<const float* const> krows,
                     std::span<const float* const> vrows, const float* q, float* out,
                     SequenceResult& result) const;
  SparseSet select_sparse_set(const SequenceRun& run, int64_t kv_head,
                              std::span<const float* const> krows, const float* q) const;
  // Fails (before any cache is modified) when a sparse forward attends sets the state lacks.
  void check_sparse_state(const SequenceForward& seq, size_t index) const;
  // Adds one sub-block's output rows (the active rows', in order) to the residual stream `x` of
  // the whole batch.
  void add_block_output(int64_t layer, SequenceRun& run, const float* out, bool ffn,
                        float* x) const;
  // Final norm, LM head and TokenStats of every sequence's output rows (cpu_outputs.cpp); x = the
  // batch's hidden rows. Sequences are taken in groups whose logits fit kLogitsGroupBytes.
  void compute_outputs(std::span<const SequenceForward> batch, std::span<const SequenceRun> runs,
                       const float* x, std::vector<SequenceResult>& results) const;
  // One group: one LM-head GEMM over all its output rows, one parallel loop of TokenStats.
  void compute_group_outputs(std::span<const SequenceForward> batch,
                             std::span<const SequenceRun> runs, const float* x,
                             std::span<SequenceResult> results) const;
  // Attention of every sequence's active rows in `layer`: across sequences on the threads when
  // each sequence's attention is small, else one sequence after another, each on all threads.
  void attend_all(int64_t layer, std::vector<SequenceRun>& runs, const float* q, float* out,
                  std::vector<SequenceResult>& results) const;
  // The FFN of layer `li` (dense or MoE, per desc_) of `m` normed rows into `out` [m, hidden].
  void run_ffn(int64_t li, const float* xn, int64_t m, float* out,
               MoeRoutingReport* routing = nullptr) const;

  // dLLM-Cache (cpu_dllm_cache.cpp): picks the rows recomputed in `layer` (writing the new V of
  // every response row when rho selects them by similarity); after each sub-block, stores the
  // recomputed rows' outputs and adds the kept outputs to every row's residual; commits the
  // canvas after the first forward.
  void reuse_select_rows(int64_t layer, SequenceRun& run, const float* x);
  void reuse_store_and_add(int64_t layer, SequenceRun& run, const float* out, bool ffn,
                           float* x) const;
  void reuse_finish(SequenceRun& run) const;

  ModelConfig config_;
  std::vector<LayerDesc> desc_;
  PartialSumReduce reduce_;
  cpu::WeightMatrix embed_, lm_head_;
  HostTensor final_norm_;
  bool tied_ = false;
  // The LM head's vocabulary rows (Model::lm_head_vocab_count: all ids but in a vocabulary-
  // parallel rank, which gives its logits slices and leaves the statistics to its group).
  int64_t head_rows_ = 0;
  bool vocab_slice_ = false;
  std::vector<CpuLayer> layers_;
  std::vector<float> inv_freq_;  // RoPE (model/rope.h)
  float rope_scale_ = 1.0f;
  // The KV pool's storage: per layer, [num_slots, kv_dim] for K and V (left uninitialised: the OS
  // commits only the pages sequences touch).
  std::vector<std::unique_ptr<float[]>> k_, v_;
  // Activations, kept between forwards: fresh large vectors each forward cost page faults and
  // page clearing (~8 % of a small model's step).
  struct Scratch {
    std::vector<float> x, xn, q, k, v, attn, o, gate, up, head_rows, logits;
  };
  mutable Scratch scratch_;
  // set_profiling(true): the MoE layers run and their experts with rows, summed.
  bool profiling_ = false;
  mutable MoeTouchCount moe_touched_;
};

}  // namespace dllm::cpu_backend
