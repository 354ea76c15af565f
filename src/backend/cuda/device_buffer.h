// Owning device (and pinned host) buffers. Allocation failures name what was being allocated.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace dllm::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t n, const char* what) { resize(n, what); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        n_(std::exchange(o.n_, 0)),
        owned_(std::exchange(o.owned_, true)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
      owned_ = std::exchange(o.owned_, true);
    }
    return *this;
  }

  // Makes this a view of `n` elements at `p`, owned elsewhere (freeing what it owned): a second
  // forward lane works in the tail of the first one's activations. A later resize() or growing
  // ensure() allocates its own memory again.
  void view(T* p, size_t n) {
    release();
    ptr_ = p;
    n_ = n;
    owned_ = false;
  }

  // Discards the contents.
  void resize(size_t n, const char* what) {
    if (n == n_ && owned_) return;
    release();
    if (n == 0) return;
    const cudaError_t err = cudaMalloc(&ptr_, n * sizeof(T));
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      size_t free_b = 0, total_b = 0;
      cudaGetLastError();
      cudaMemGetInfo(&free_b, &total_b);
      fail("CUDA out of memory allocating ", (n * sizeof(T)) >> 20, " MiB for ", what, " (",
           free_b >> 20, " of ", total_b >> 20, " MiB free): ", cudaGetErrorString(err));
    }
    n_ = n;
    owned_ = true;
  }
  // Grows (never shrinks), discarding contents. True when the buffer moved (captured CUDA graphs
  // that point at it are stale then).
  bool ensure(size_t n, const char* what) {
    if (n <= n_) return false;
    resize(n, what);
    return true;
  }

  T* get() { return ptr_; }
  const T* get() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  void release() {
    if (ptr_ && owned_) cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = 0;
    owned_ = true;
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
  bool owned_ = true;  // false: a view (view())
};

}  // namespace dllm::cuda

namespace dllm::cuda {

// Page-locked host memory: device copies from/to it can be captured in CUDA graphs.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  bool ensure(size_t n) {
    if (n <= n_) return false;
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    n_ = 0;
    DLLM_CUDA_CHECK(
        cudaHostAlloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T), cudaHostAllocDefault));
    n_ = n;
    return true;
  }
  T* get() { return ptr_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace dllm::cuda
