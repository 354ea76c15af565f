#include "backend/cpu/cpu_weight.h"

#include <cstring>

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_f32.h"
#include "backend/cpu/matmul_precision.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace dllm::cpu {

WeightMatrix WeightMatrix::of(const TensorEntry* t) {
  WeightMatrix w;
  if (!t) return w;
  if (!t->dtype)
    fail(t->file, ": tensor ", t->name, " has dtype ", t->dtype_name, ", not a weight");
  w.dtype = *t->dtype;
  w.rows = t->shape.empty() ? 1 : t->shape[0];
  w.cols = w.rows == 0 ? 0 : t->numel() / w.rows;
  w.data = t->data;
  // The SIMD kernels load unaligned, but fp32 values are read as floats elsewhere (the portable
  // kernel, row_to_f32's memcpy aside): an fp32 tensor at an odd offset gets an aligned copy.
  if (w.dtype == DType::kF32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) {
    auto copy = std::make_shared<std::vector<float>>(static_cast<size_t>(t->numel()));
    std::memcpy(copy->data(), t->data, t->nbytes);
    w.data = copy->data();
    w.owned = std::move(copy);
  }
  return w;
}

WeightMatrix WeightMatrix::row_slice(int64_t first, int64_t count) const {
  WeightMatrix s = *this;
  s.data = static_cast<const unsigned char*>(data) +
           static_cast<size_t>(first * cols) * dtype_size(dtype);
  s.rows = count;
  return s;
}

void WeightMatrix::row_to_f32(int64_t r, float* out) const {
  convert_to_f32(
      dtype,
      static_cast<const unsigned char*>(data) + static_cast<size_t>(r * cols) * dtype_size(dtype),
      out, static_cast<size_t>(cols));
}

void matmul_nt(const float* a, int64_t lda, const WeightMatrix& w, float* out, int64_t ldo,
               int64_t m, bool accumulate) {
  if (w.dtype == DType::kBF16) {
    const auto* w16 = static_cast<const uint16_t*>(w.data);
    switch (matmul_precision()) {
      case MatmulPrecision::kAmx:  // the default where the CPU has AMX-BF16
        if (!amx_pays_off(w.rows, w.cols)) break;
        gemm_nt_amx(a, lda, w16, w.cols, out, ldo, m, w.rows, w.cols, accumulate);
        return;
      case MatmulPrecision::kBf16:  // opt-in
        gemm_nt_bf16(a, lda, w16, w.cols, out, ldo, m, w.rows, w.cols, accumulate);
        return;
      case MatmulPrecision::kFp32:
        break;
    }
  }
  gemm_nt(a, lda, w.dtype, w.data, w.cols, out, ldo, m, w.rows, w.cols, accumulate);
}

}  // namespace dllm::cpu
