#include "backend/tensor_parallel_backend.h"

#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/thread_all_reduce.h"
#include "backend/sequence_slots.h"
#include "backend/vocab_parallel_outputs.h"
#include "core/error.h"
#include "model/layer_desc.h"
#include "model/tensor_parallel_plan.h"

namespace dllm {

namespace {

// One method state per rank: each rank keeps its own heads' share of a sequence's method data.
class GroupMethodState final : public MethodState {
 public:
  std::vector<std::unique_ptr<MethodState>> ranks;
  std::vector<float> kept_logits;  // S2D2's draft rows, whole (vocab_parallel_outputs.h)
};

// The options whose per-head data a rank cannot give for the whole model yet.
void refuse_unsplit_requests(const SequenceForward& seq, size_t index) {
  const char* what = nullptr;
  if (seq.dllm_cache)
    what = "--strategy dllm-cache (each rank would choose its rows from its own heads)";
  else if (seq.want_attention_rows || seq.want_attention_rollout)
    what = "d2Cache's attention rollout (--strategy d2cache: each rank sees its heads only)";
  else if (seq.want_layer_qk)
    what = "the pattern search's per-layer queries and keys";
  else if (seq.sparse_prefill)
    what = "--sparse-prefill (its patterns are per query head of the whole model)";
  else if (seq.sparse && seq.sparse->want_selection)
    what = "--sparse-recall (each rank selects for its own KV heads)";
  if (what) fail("forward request ", index, ": ", what, " does not combine with --tensor-parallel");
}

// Sparse attention selects a KV head's keys from all the query heads of its group. When the
// group replicates KV heads (fewer than its ranks), a head's query group is spread over several
// ranks and each would select from its part alone: other keys than one device's, other ids.
void refuse_sparse_over_replicated_kv_heads(const SequenceForward& seq, size_t index,
                                            const std::string& replicated) {
  if (seq.sparse && !replicated.empty())
    fail("forward request ", index,
         ": sparse attention (MAGE, Quest, SparseD) does not combine with --tensor-parallel here: ",
         replicated,
         ", so each of its query groups is spread over several ranks, which would each select the "
         "head's keys from their share alone (use a --tensor-parallel that divides "
         "num_key_value_heads)");
}

// Empty when every layer splits its KV heads; else the first layer that replicates them.
std::string replicated_kv_heads(const std::vector<LayerDesc>& layers, int world) {
  for (size_t l = 0; l < layers.size(); ++l)
    if (layers[l].attention.kv_heads % world != 0)
      return "layer " + std::to_string(l) + " has num_key_value_heads " +
             std::to_string(layers[l].attention.kv_heads) + " for " + std::to_string(world) +
             " ranks";
  return "";
}

}  // namespace

TensorParallelBackend::TensorParallelBackend(const Model& whole, int world, RankGroup group,
                                             MoeSplit moe_split)
    : config_(whole.config()), moe_split_(moe_split), group_(std::move(group)) {
  if (world < 1) fail("--tensor-parallel must be at least 1 (got ", world, ")");
  const auto layers = describe_layers(config_);
  for (int r = 0; r < world; ++r)
    shards_.push_back(
        Model::shard(whole, plan_tensor_parallel(layers, config_.vocab_size, r, world, moe_split)));
  replicated_kv_heads_ = replicated_kv_heads(layers, world);
  threads_ = std::make_unique<RankThreads>(world);
  ranks_.resize(static_cast<size_t>(world));
  threads_->run_all([&](int r) { ranks_[size_t(r)] = group_.make_rank(*shards_[size_t(r)], r); });
}

TensorParallelBackend::~TensorParallelBackend() {
  // Each rank's device memory is freed on its own thread, before the collective goes.
  threads_->run_all([&](int r) { ranks_[size_t(r)].reset(); });
}

std::string TensorParallelBackend::name() const {
  const bool experts_split = config_.moe.num_experts > 0 && moe_split_ == MoeSplit::kExperts;
  return ranks_[0]->name() + " x" + std::to_string(world()) + " tensor-parallel" +
         (experts_split ? " (expert-parallel MoE)" : "");
}

std::pair<int64_t, int64_t> TensorParallelBackend::device_memory() const {
  // Per device: the fullest rank's free bytes bound what every rank may still allocate.
  std::vector<std::pair<int64_t, int64_t>> each(ranks_.size());
  threads_->run_all([&](int r) { each[size_t(r)] = ranks_[size_t(r)]->device_memory(); });
  return *std::min_element(each.begin(), each.end());
}

int64_t TensorParallelBackend::activation_bytes(int64_t rows) const {
  return ranks_[0]->activation_bytes(rows);
}

int64_t TensorParallelBackend::kv_bytes_per_slot() const {
  return ranks_[0]->kv_bytes_per_slot();  // per device, as the pool is sized per device
}

int64_t TensorParallelBackend::default_kv_pool_bytes() const {
  int64_t bytes = 0;
  threads_->run_on(0, [&] { bytes = ranks_[0]->default_kv_pool_bytes(); });
  return bytes;
}

void TensorParallelBackend::allocate_kv_storage(int64_t num_slots) {
  KvPool& pool = kv_pool();  // create_kv_pool() sets it before allocating
  if (pool.num_slots() != num_slots) fail("internal: the group's pool changed while allocating");
  threads_->run_all([&](int r) { ranks_[size_t(r)]->join_group_pool(pool); });
}

void TensorParallelBackend::copy_kv_pages(std::span<const std::pair<int32_t, int32_t>> copies) {
  run_ranks([&](int r) { ranks_[size_t(r)]->copy_group_pages(copies); });
}

std::unique_ptr<MethodState> TensorParallelBackend::create_method_state() {
  auto state = std::make_unique<GroupMethodState>();
  for (auto& rank : ranks_) state->ranks.push_back(rank->create_method_state());
  return state;
}

void TensorParallelBackend::check_forward(const SequenceForward& seq, size_t index) const {
  refuse_unsplit_requests(seq, index);
  refuse_sparse_over_replicated_kv_heads(seq, index, replicated_kv_heads_);
  ranks_[0]->check_forward(seq, index);
}

void TensorParallelBackend::run_ranks(const std::function<void(int)>& job) {
  check_usable();
  try {
    threads_->run_all(job, group_.abort);
  } catch (const std::exception& e) {
    failure_ = e.what();
    throw;
  }
}

void TensorParallelBackend::check_usable() const {
  if (!failure_.empty())
    fail("the tensor-parallel group stopped after a rank failed (", failure_,
         "); restart the engine");
}

std::vector<SequenceResult> TensorParallelBackend::forward(std::span<const SequenceForward> batch) {
  check_usable();
  for (size_t i = 0; i < batch.size(); ++i) {
    validate_forward(config_, batch[i], i);
    check_forward(batch[i], i);
  }
  // The bookkeeping, once for the group: every cache reserves and un-shares the slots it writes
  // (only where the queries go: the ranks check what they see); a cache-less request gets an
  // empty cache of the pool (the same keys: nothing committed, its queries after it).
  std::vector<KvCache*> caches(batch.size());
  std::vector<std::unique_ptr<KvCache>> scratch;
  std::vector<std::vector<int32_t>> query_slots(batch.size());
  std::vector<std::pair<int32_t, int32_t>> copies;
  for (size_t i = 0; i < batch.size(); ++i) {
    KvCache* cache = batch[i].cache;
    if (!cache) cache = scratch.emplace_back(std::make_unique<KvCache>(kv_pool())).get();
    if (&cache->pool() != &kv_pool()) fail("the cache was not created by this backend");
    query_slots[i] = query_slots_of(batch[i], cache);
    int64_t needed = 0;
    for (int32_t slot : query_slots[i]) needed = std::max<int64_t>(needed, slot + 1);
    cache->reserve(needed);
    for (const auto& copy : cache->prepare_writes(query_slots[i])) copies.push_back(copy);
    caches[i] = cache;
  }
  const bool vocab_split = shards_[0]->lm_head_is_vocab_slice();
  std::vector<std::vector<SequenceResult>> results(ranks_.size());
  run_ranks([&](int r) {
    std::vector<SequenceForward> mine(batch.begin(), batch.end());
    for (size_t i = 0; i < mine.size(); ++i) {
      mine[i].cache = caches[i];
      if (mine[i].state)
        mine[i].state = static_cast<GroupMethodState&>(*mine[i].state).ranks[size_t(r)].get();
      if (vocab_split) ask_ranks_for_slices(mine[i]);
    }
    ranks_[size_t(r)]->copy_group_pages(copies);
    results[size_t(r)] = ranks_[size_t(r)]->forward(mine);
  });
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].cache) dllm::commit_cache_writes(batch[i], *batch[i].cache, query_slots[i]);
  if (vocab_split) join_rank_outputs(batch, results);
  return std::move(results[0]);
}

void TensorParallelBackend::join_rank_outputs(std::span<const SequenceForward> batch,
                                              std::vector<std::vector<SequenceResult>>& results) {
  std::vector<int64_t> widths;
  for (const auto& shard : shards_) widths.push_back(shard->lm_head_vocab_count());
  std::vector<SequenceResult*> ranks(results.size());
  std::vector<float> no_kept;  // a request without method state keeps nothing
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t r = 0; r < results.size(); ++r) ranks[r] = &results[r][i];
    std::vector<float>& kept =
        batch[i].state ? static_cast<GroupMethodState&>(*batch[i].state).kept_logits : no_kept;
    join_vocab_slices(batch[i], ranks, widths, config_.vocab_size, kept);
  }
}

void TensorParallelBackend::fill_cache_random(KvCache& cache, int64_t n, uint64_t seed) {
  check_usable();
  // One rank after the other: each fills its KV heads; the bookkeeping they repeat is the same.
  for (int r = 0; r < world(); ++r)
    threads_->run_on(r, [&] { ranks_[size_t(r)]->fill_cache_random(cache, n, seed); });
}

// Every rank profiles (they run the same forwards in step; an expert-parallel rank counts its own
// experts, profiled_moe_experts_touched()); profile() reads rank 0's times.
void TensorParallelBackend::set_profiling(bool on) {
  for (int r = 0; r < world(); ++r)
    threads_->run_on(r, [&] { ranks_[size_t(r)]->set_profiling(on); });
}

std::vector<std::pair<std::string, double>> TensorParallelBackend::profile() const {
  std::vector<std::pair<std::string, double>> out;
  threads_->run_on(0, [&] { out = ranks_[0]->profile(); });
  return out;
}

std::optional<double> TensorParallelBackend::profiled_moe_experts_touched() const {
  // Split by feature, every rank runs every touched expert (rank 0's count is the group's);
  // split by expert, each rank counts only its own and the counts add up.
  const int counted = moe_split_ == MoeSplit::kExperts ? world() : 1;
  std::optional<double> total;
  for (int r = 0; r < counted; ++r)
    threads_->run_on(r, [&] {
      if (const auto n = ranks_[size_t(r)]->profiled_moe_experts_touched())
        total = total.value_or(0.0) + *n;
    });
  return total;
}

namespace {

RankGroup cpu_rank_group(int world) {
  auto sum = std::make_shared<cpu_backend::ThreadAllReduce>(world);
  RankGroup g;
  g.make_rank = [sum](const Model& shard, int rank) -> std::unique_ptr<Backend> {
    auto backend = std::make_unique<cpu_backend::CpuBackend>(shard);
    backend->set_partial_sum_reduce(
        [sum, rank](float* rows, int64_t count) { (*sum)(rank, rows, count); });
    return backend;
  };
  g.abort = [sum] { sum->abort(); };
  g.collective = sum;
  return g;
}

}  // namespace

#ifdef DLLM_HAVE_CUDA
RankGroup cuda_rank_group(int world);  // backend/cuda/cuda_rank_group.cpp
#else
static RankGroup cuda_rank_group(int) {
  fail("this dllm was built without CUDA (rebuild where nvcc is installed)");
}
#endif

std::unique_ptr<Backend> make_tensor_parallel_backend(const Model& whole, const std::string& device,
                                                      int world, MoeSplit moe_split) {
  if (world < 1 || world > 64) fail("--tensor-parallel must be in [1, 64] (got ", world, ")");
  if (device == "cpu")
    return std::make_unique<TensorParallelBackend>(whole, world, cpu_rank_group(world), moe_split);
  if (device == "cuda" || (device == "auto" && cuda_available()))
    return std::make_unique<TensorParallelBackend>(whole, world, cuda_rank_group(world), moe_split);
  if (device == "auto")
    return std::make_unique<TensorParallelBackend>(whole, world, cpu_rank_group(world), moe_split);
  fail("--device '", device, "' (expected auto, cpu or cuda)");
}

}  // namespace dllm
