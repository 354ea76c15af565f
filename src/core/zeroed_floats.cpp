#include "core/zeroed_floats.h"

#include <sys/mman.h>

#include <cstdint>

namespace dllm {

std::vector<float> zeroed_floats(size_t n) {
  std::vector<float> v;
  v.reserve(n);  // allocated, not yet touched
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(v.data());
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t last = (begin + n * sizeof(float)) & ~(kHuge - 1);
  if (last > first)  // advice only: refused (no THP), the fill below still gives zeros
    madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  v.resize(n);
  return v;
}

}  // namespace dllm
