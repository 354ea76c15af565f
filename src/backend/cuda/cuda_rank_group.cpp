// The CUDA kind of tensor-parallel group (tensor_parallel_backend.h): rank r on GPU r, the
// partial sums joined by NCCL's all-reduce on each rank's forward stream.
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/nccl_library.h"
#include "backend/tensor_parallel_backend.h"

namespace dllm {

#ifndef DLLM_HAVE_NCCL_HEADER
RankGroup cuda_rank_group(int) {
  fail("--tensor-parallel on CUDA: this dllm was built without NCCL's header (nccl.h)");
}
#else
namespace {

using cuda_backend::DeviceAllReduce;
using cuda_backend::NcclLibrary;

// One communicator per GPU, made together (ncclCommInitAll: one process drives every rank).
class NcclGroup {
 public:
  explicit NcclGroup(int world) : nccl_(NcclLibrary::load()), comms_(static_cast<size_t>(world)) {
    int count = 0;
    DLLM_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (world > count)
      fail("--tensor-parallel ", world, " needs ", world, " GPUs; ", count, " visible");
    // NVLink multicast stays off unless asked for (it reserves memory on shared machines).
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    std::vector<int> devices(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) devices[size_t(r)] = r;
    nccl_.check(nccl_.comm_init_all(comms_.data(), world, devices.data()), "ncclCommInitAll");
    for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<Rank>(this, r));
  }
  ~NcclGroup() {
    for (ncclComm_t comm : comms_)
      if (comm) nccl_.comm_destroy(comm);  // (abort() leaves none)
  }

  DeviceAllReduce* rank(int r) { return ranks_[size_t(r)].get(); }

  // Ends the group's pending collectives, so no rank waits for one that failed.
  void abort() {
    std::lock_guard lock(abort_mutex_);
    if (aborted_) return;
    aborted_ = true;
    for (ncclComm_t& comm : comms_) {
      nccl_.comm_abort(comm);
      comm = nullptr;
    }
  }

 private:
  class Rank final : public DeviceAllReduce {
   public:
    Rank(NcclGroup* group, int rank) : group_(group), rank_(rank) {}
    void sum(float* data, int64_t count, cudaStream_t stream) override {
      const NcclLibrary& n = group_->nccl_;
      n.check(n.all_reduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum,
                           group_->comms_[size_t(rank_)], stream),
              "ncclAllReduce");
    }

   private:
    NcclGroup* group_;
    int rank_;
  };

  const NcclLibrary& nccl_;
  std::vector<ncclComm_t> comms_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex abort_mutex_;
  bool aborted_ = false;
};

}  // namespace

RankGroup cuda_rank_group(int world) {
  auto nccl = std::make_shared<NcclGroup>(world);
  RankGroup g;
  g.make_rank = [nccl, world](const Model& shard, int rank) -> std::unique_ptr<Backend> {
    auto backend = std::make_unique<cuda_backend::CudaBackend>(shard, rank);
    backend->set_partial_sum_reduce(nccl->rank(rank), rank, world);
    return backend;
  };
  g.abort = [nccl] { nccl->abort(); };
  g.collective = nccl;
  return g;
}
#endif

}  // namespace dllm
