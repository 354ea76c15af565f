// NCCL, loaded when a tensor-parallel group is first built (dlopen), so the dllm binary runs
// without it everywhere else: the CUDA toolkit's libnccl.so.2, PyPI's nvidia-nccl-cu13 (its
// lib/ folder on LD_LIBRARY_PATH), or the file DLLM_NCCL_LIBRARY names.
#pragma once

#if __has_include(<nccl.h>)
#include <nccl.h>
#define DLLM_HAVE_NCCL_HEADER 1
#endif

namespace dllm::cuda_backend {

#ifdef DLLM_HAVE_NCCL_HEADER
// The entry points a group uses. load() fails with what to install when the library is missing.
struct NcclLibrary {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;

  static const NcclLibrary& load();
  // Error naming `call` and NCCL's message when `result` is not ncclSuccess.
  void check(ncclResult_t result, const char* call) const;
};
#endif

}  // namespace dllm::cuda_backend
