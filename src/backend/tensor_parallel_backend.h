// Tensor parallel (issue 27): one model split over `world` ranks, Megatron style
// (model/tensor_parallel_plan.h, Model::shard), behind the ordinary Backend contract — the engine,
// its scheduler and every decoder drive it exactly like one device.
//
// One process, one thread per rank (rank_threads.h). This backend is the group's coordinator and
// the scheduler's only backend: it owns the KV pool's page tables and does each forward's cache
// bookkeeping once — reserving slots, un-sharing pages (each rank copies them in its own
// storage), committing after every rank is done — while the ranks, each a whole backend of its
// kind over its shard, compute the same batch at once and sum their partial block outputs with
// the group's all-reduce (NCCL on GPUs, a thread sum on the CPU). The step plan needs no
// broadcast: the ranks read the coordinator's batch in shared memory. The LM head is split by
// vocabulary: each rank reduces its slice of every greedy row to a few numbers that the
// coordinator merges (rows the host finishes come back as slices and are joined there).
//
// A failure inside a rank (out of device memory, a device error) aborts the group's collective,
// so no rank is left waiting, and every later forward fails with that cause: a group is not
// resumed after a rank failed. Requests a rank cannot serve are refused by check_forward() first,
// one request at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/rank_threads.h"
#include "model/tensor_parallel_plan.h"

namespace dllm {

// What a device kind gives a group: how to build one rank's backend over its shard (called on
// that rank's thread, hooking the rank's partial sums to the group's all-reduce), how to release
// every rank waiting in the all-reduce, and the all-reduce's own state.
struct RankGroup {
  std::function<std::unique_ptr<Backend>(const Model& shard, int rank)> make_rank;
  std::function<void()> abort;
  std::shared_ptr<void> collective;  // kept alive until every rank's backend is gone
};

class TensorParallelBackend final : public Backend {
 public:
  // Shards `whole` (which must outlive this backend) over group.world ranks; Error naming the
  // config field a group of that size cannot split, or the family it cannot shard yet.
  TensorParallelBackend(const Model& whole, int world, RankGroup group, MoeSplit moe_split);
  ~TensorParallelBackend() override;

  std::string name() const override;
  std::pair<int64_t, int64_t> device_memory() const override;
  int64_t activation_bytes(int64_t rows) const override;
  int64_t kv_bytes_per_slot() const override;
  std::unique_ptr<MethodState> create_method_state() override;
  void check_forward(const SequenceForward& seq, size_t index) const override;
  std::vector<SequenceResult> forward(std::span<const SequenceForward> batch) override;
  void fill_cache_random(KvCache& cache, int64_t n, uint64_t seed) override;
  void set_profiling(bool on) override;
  std::vector<std::pair<std::string, double>> profile() const override;
  std::optional<double> profiled_moe_experts_touched() const override;

  int world() const { return threads_->world(); }

 protected:
  void allocate_kv_storage(int64_t num_slots) override;
  void copy_kv_pages(std::span<const std::pair<int32_t, int32_t>> copies) override;
  int64_t default_kv_pool_bytes() const override;

 private:
  void check_usable() const;
  // Runs job(rank) on every rank at once; a rank's failure aborts the collective and stops the
  // group (failure_), then rethrows.
  void run_ranks(const std::function<void(int)>& job);
  // A vocabulary-parallel group's per-sequence outputs from every rank's into results[0]
  // (vocab_parallel_outputs.h).
  void join_rank_outputs(std::span<const SequenceForward> batch,
                         std::vector<std::vector<SequenceResult>>& results);

  const ModelConfig config_;
  const MoeSplit moe_split_;
  RankGroup group_;
  std::vector<std::unique_ptr<Model>> shards_;
  std::unique_ptr<RankThreads> threads_;  // mutable work: every rank call goes through it
  std::vector<std::unique_ptr<Backend>> ranks_;
  std::string failure_;  // why the group stopped; empty while usable
  // Which layer replicates its KV heads over the ranks (empty: none does); sparse attention is
  // refused then (tensor_parallel_backend.cpp).
  std::string replicated_kv_heads_;
};

// A group of `world` ranks on `device` ("cpu": threads summing in host memory; "cuda": GPUs
// 0..world-1 joined by NCCL). world 1 runs the same path with a group of one. MoE layers split
// as `moe_split` says (tensor_parallel_plan.h).
std::unique_ptr<Backend> make_tensor_parallel_backend(
    const Model& whole, const std::string& device, int world,
    MoeSplit moe_split = MoeSplit::kExpertFeatures);

}  // namespace dllm
