// Backend: runs model forwards on one kind of hardware. The CPU backend (cpu/) is the reference;
// the CUDA backend implements the same contract. A backend owns the storage of one paged KV pool
// (kv/kv_pool.h), sized once; every sequence's KvCache draws its pages from it.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "attention/sparse_prefill_plan.h"
#include "backend/forward_batch.h"
#include "backend/method_state.h"
#include "kv/kv_cache.h"
#include "kv/kv_pool.h"
#include "model/model.h"

namespace dllm {

class TensorParallelBackend;

class Backend {
  friend class TensorParallelBackend;  // drives its ranks' protected storage calls

 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // The device's memory (bytes free now, total); {0, 0} for the host.
  virtual std::pair<int64_t, int64_t> device_memory() const { return {0, 0}; }
  // Bytes of activations and workspaces a forward of `rows` query rows (with as many output
  // rows) may allocate — what the KV pool must leave free.
  virtual int64_t activation_bytes(int64_t rows) const {
    (void)rows;
    return 0;
  }
  // Bytes of K/V one cache slot takes (all layers, K and V) in this backend's storage.
  virtual int64_t kv_bytes_per_slot() const = 0;
  // Allocates the KV pool's storage: `num_pages` pages of `page_size` slots. Once, before the
  // first cache is created (Error otherwise).
  void create_kv_pool(int64_t num_pages, int32_t page_size);
  // The pool; a default one (default_kv_pool_bytes()) is created on first use when none was.
  KvPool& kv_pool();
  bool has_kv_pool() const { return pool_ != nullptr; }
  // Tensor parallel (tensor_parallel_backend.h): this backend computes one rank of a group whose
  // coordinator owns `pool` and does every cache's bookkeeping once per forward — reserving,
  // un-sharing pages (copy_group_pages) and committing. Allocates this rank's storage for the
  // pool; from then on forward() only reads the caches and writes this rank's K/V.
  void join_group_pool(KvPool& pool);
  // The coordinator's page copies (KvCache::prepare_writes), made in this rank's storage.
  void copy_group_pages(std::span<const std::pair<int32_t, int32_t>> copies) {
    if (!copies.empty()) copy_kv_pages(copies);
  }
  // A cache for one sequence over the pool, with `capacity` slots reserved up front (it grows
  // as needed while the pool has pages).
  std::unique_ptr<KvCache> create_cache(int64_t capacity);
  // Per-sequence state of the methods that keep device data between forwards (S2D2's kept draft
  // rows, dLLM-Cache's per-layer features): created here, owned by the sequence, named by
  // SequenceForward::state.
  virtual std::unique_ptr<MethodState> create_method_state() = 0;

  // What this backend's forward refuses of one sequence's forward beyond validate_forward()
  // (the CUDA backend: Quest over a partial last page under a rule other than block-causal):
  // throws Error naming the problem.
  // The engine asks when it plans a sequence's forwards, so a refusal ends that request alone
  // instead of failing the step's whole batch in forward().
  virtual void check_forward(const SequenceForward& seq, size_t index) const {
    (void)seq;
    (void)index;
  }

  // Runs one forward over a batch of sequences. Invalid requests (ids out of vocabulary, bad
  // positions, slots out of range, ...) throw Error before any cache is modified.
  virtual std::vector<SequenceResult> forward(std::span<const SequenceForward> batch) = 0;

  // Benchmarks: fills slots [0, n) of `cache` with random K/V at positions 0..n-1 and commits
  // them, so long contexts can be timed without prefilling them.
  virtual void fill_cache_random(KvCache& cache, int64_t n, uint64_t seed) = 0;
  // Benchmarks: per-op time accounting of the following forwards (ms per op class), where the
  // backend supports it; empty otherwise.
  virtual void set_profiling(bool on) { (void)on; }
  virtual std::vector<std::pair<std::string, double>> profile() const { return {}; }
  // Benchmarks: the routed experts with rows per MoE layer, averaged over the profiled forwards
  // (read before set_profiling(false)); the MoE floor counts these. nullopt where the backend
  // does not count them (or ran no MoE layer).
  virtual std::optional<double> profiled_moe_experts_touched() const { return std::nullopt; }

 protected:
  // What profiled_moe_experts_touched() averages: the experts with rows each MoE layer run had.
  struct MoeTouchCount {
    int64_t touched = 0, layer_runs = 0;
    void add(int64_t experts_with_rows) {
      touched += experts_with_rows;
      ++layer_runs;
    }
    std::optional<double> average() const {
      if (layer_runs == 0) return std::nullopt;
      return double(touched) / double(layer_runs);
    }
  };

  // The pool's storage: allocated by create_kv_pool(), read and written by physical slot.
  virtual void allocate_kv_storage(int64_t num_slots) = 0;
  // Copies whole pages (KvCache::prepare_writes' copy-on-write pairs, physical page numbers).
  virtual void copy_kv_pages(std::span<const std::pair<int32_t, int32_t>> copies) = 0;
  // Size of the pool created when none was configured (tests, tools).
  virtual int64_t default_kv_pool_bytes() const = 0;
  // Before a forward writes `query_slots` of `cache`: reserves the slots and replaces pages
  // shared with other sequences by private copies (KvCache::prepare_writes).
  void prepare_cache_writes(KvCache& cache, std::span<const int32_t> query_slots,
                            int64_t needed_capacity);
  // After a forward wrote `query_slots` of `cache`: their positions, and the new length of an
  // append (commit_cache_writes in sequence_slots.h). Nothing for a rank of a group.
  void commit_cache_writes(const SequenceForward& seq, KvCache& cache,
                           std::span<const int32_t> query_slots);

 private:
  std::unique_ptr<KvPool> own_pool_;
  KvPool* pool_ = nullptr;   // own_pool_, or the group's (join_group_pool)
  bool group_rank_ = false;  // the group's coordinator keeps the caches
};

// Validates one request against the model; shared by every backend.
void validate_forward(const ModelConfig& config, const SequenceForward& seq, size_t index);

std::unique_ptr<Backend> make_cpu_backend(const Model& model);
// The CUDA backend on `device` (Error when built without CUDA or no such device).
std::unique_ptr<Backend> make_cuda_backend(const Model& model, int device = 0);
// True when this build has the CUDA backend and a GPU is visible.
bool cuda_available();
// Bytes per second a large device-to-device copy moves on `device` ("cpu" or "cuda"), counting
// bytes read plus bytes written: the bandwidth a memory-bound step can hope for.
double measure_copy_bandwidth(const std::string& device);
// Multiply-add FLOP/s of a large GEMM on `device` ("cpu": fp32; "cuda": bf16 with fp32
// accumulation): the rate a compute-bound step can hope for.
double measure_gemm_rate(const std::string& device);
// Microseconds per call of the CUDA attention kernel alone (key splits + combine) on one layer's
// shapes: a block-causal block of n_q queries after `context` cached keys, every call reading its
// K/V from device memory (not L2). Error when built without CUDA.
double time_cuda_attention_kernel(int n_q, int context, int heads, int kv_heads, int head_dim,
                                  int reps);
// Microseconds per batched attention call (attention_batch: one call for every sequence of a
// step) on one layer's shapes: `seqs` sequences, each a block-causal block of n_q queries after
// `context` cached keys, their K/V in one paged pool (pages of page_size slots, shuffled over the
// pool), every call reading from device memory. Error when built without CUDA.
double time_cuda_attention_batch(int seqs, int n_q, int context, int heads, int kv_heads,
                                 int head_dim, int page_size, int reps);
// Microseconds per call of the forward's dense attention (attention_batch: the Hopper wgmma kernel
// for head_dim 128, else mma.sync) on one prefill of n tokens from position 0, causal
// (block_size 1) or block-causal, its K/V in a paged pool: the sparse prefill's other baseline.
// Error when built without CUDA.
double time_cuda_dense_prefill(int n, int block_size, int heads, int kv_heads, int head_dim,
                               int reps);
// Microseconds per call of the sparse prefill kernel (backend/cuda/sparse_prefill.h) for `plan`
// on random bf16 Q/K/V of its length. Error when built without CUDA.
double time_cuda_sparse_prefill(const SparsePrefillPlan& plan, int heads, int kv_heads,
                                int head_dim, int reps);
// "cpu", "cuda" or "auto" (CUDA when available, else CPU); with tensor_parallel > 1 a group of
// that many ranks (tensor_parallel_backend.h). `model` must outlive the backend.
std::unique_ptr<Backend> make_backend(const Model& model, const std::string& device,
                                      int tensor_parallel = 1, bool expert_parallel = false);

}  // namespace dllm
