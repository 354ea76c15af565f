#include "backend/cuda/nccl_library.h"

#ifdef DLLM_HAVE_NCCL_HEADER
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"

namespace dllm::cuda_backend {

namespace {

template <class Fn>
void resolve(void* lib, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (!fn) fail("NCCL: ", symbol, " is missing from the loaded libnccl");
}

NcclLibrary open_library() {
  const char* named = std::getenv("DLLM_NCCL_LIBRARY");
  const std::string path = named && *named ? named : "libnccl.so.2";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    fail("--tensor-parallel on CUDA needs NCCL: ", dlerror(),
         ". Install it (pip install nvidia-nccl-cu13, then put its nvidia/nccl/lib on "
         "LD_LIBRARY_PATH; or the CUDA toolkit's libnccl), or set DLLM_NCCL_LIBRARY to the "
         "file");
  NcclLibrary n;
  resolve(lib, "ncclGetVersion", n.get_version);
  resolve(lib, "ncclCommInitAll", n.comm_init_all);
  resolve(lib, "ncclCommDestroy", n.comm_destroy);
  resolve(lib, "ncclCommAbort", n.comm_abort);
  resolve(lib, "ncclAllReduce", n.all_reduce);
  resolve(lib, "ncclGetErrorString", n.error_string);
  int version = 0;
  n.check(n.get_version(&version), "ncclGetVersion");
  if (version / 10000 < 2 || (version / 10000 == 2 && version / 100 % 100 < 18))
    fail("NCCL ", version, " is too old: --tensor-parallel needs 2.18 or newer (", path, ")");
  return n;  // the library stays loaded for the process
}

}  // namespace

const NcclLibrary& NcclLibrary::load() {
  static std::once_flag once;
  static NcclLibrary library;
  static std::string error;
  std::call_once(once, [] {
    try {
      library = open_library();
    } catch (const Error& e) {
      error = e.what();
    }
  });
  if (!error.empty()) fail(error);
  return library;
}

void NcclLibrary::check(ncclResult_t result, const char* call) const {
  if (result != ncclSuccess)
    fail("NCCL error in ", call, ": ", error_string ? error_string(result) : "(unknown)");
}

}  // namespace dllm::cuda_backend
#endif
