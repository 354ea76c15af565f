// A weight matrix of the CPU forward, kept once in the checkpoint's own dtype where it lies (the
// mapped safetensors file, or the bytes a random model owns): the GEMM widens bf16 / f16 to fp32
// in registers (gemm_f32.h), with the bits of an fp32 copy, so no copy is made. Norm weights and
// biases, which are tiny and read elementwise, stay fp32 HostTensors.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace dllm {
struct TensorEntry;
}

namespace dllm::cpu {

struct WeightMatrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;  // rows × cols values of `dtype`, row-major, contiguous
  int64_t rows = 0, cols = 0;
  // An fp32 copy that `data` points into, only where the file's fp32 bytes are not 4-aligned.
  std::shared_ptr<const std::vector<float>> owned;

  // The 2-D tensor `t` ([rows, cols]; higher ranks fold into cols) as stored; empty for nullptr
  // (an optional weight the checkpoint lacks).
  static WeightMatrix of(const TensorEntry* t);

  bool empty() const { return data == nullptr; }
  size_t bytes() const { return static_cast<size_t>(rows * cols) * dtype_size(dtype); }
  // Rows [first, first + count) (a fused [Q | K | V] weight split on the head axis): a view.
  WeightMatrix row_slice(int64_t first, int64_t count) const;
  // Row r widened to fp32 into out[0, cols) (an embedding lookup).
  void row_to_f32(int64_t r, float* out) const;
};

// out[m, w.rows] = a[m, w.cols] · wᵀ (+ out): the batch-invariant GEMM (gemm_f32.h) on w's
// stored dtype; lda / ldo are row strides of a and out.
void matmul_nt(const float* a, int64_t lda, const WeightMatrix& w, float* out, int64_t ldo,
               int64_t m, bool accumulate = false);

}  // namespace dllm::cpu
