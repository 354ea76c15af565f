// The process-wide precision of the CPU forward's bf16-weight products (matmul_precision.h).
#include "backend/cpu/matmul_precision.h"

#include <atomic>
#include <cstring>

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/gemm_bf16.h"
#include "core/error.h"

namespace dllm::cpu {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_precision{kUnset};  // a MatmulPrecision once set

// `--cpu-matmul`'s words, both ways.
struct PrecisionName {
  MatmulPrecision precision;
  const char* name;
};
constexpr PrecisionName kNames[] = {{MatmulPrecision::kFp32, "fp32"},
                                    {MatmulPrecision::kAmx, "amx"},
                                    {MatmulPrecision::kBf16, "bf16"}};

}  // namespace

void set_matmul_precision(MatmulPrecision precision, const char* what) {
  if (precision == MatmulPrecision::kBf16 && !gemm_bf16_available())
    fail(what, " bf16 needs a CPU with AVX512-BF16 (this one has none); use fp32");
  if (precision == MatmulPrecision::kAmx && !gemm_amx_available())
    fail(what,
         " amx needs a CPU with AMX-BF16 tiles that the kernel grants (this one has none); "
         "use fp32");
  g_precision.store(static_cast<int>(precision), std::memory_order_relaxed);
}

MatmulPrecision matmul_precision() {
  const int set = g_precision.load(std::memory_order_relaxed);
  if (set != kUnset) return static_cast<MatmulPrecision>(set);
  static const MatmulPrecision fallback =
      gemm_amx_available() ? MatmulPrecision::kAmx : MatmulPrecision::kFp32;
  return fallback;
}

MatmulPrecision parse_matmul_precision(const char* text, const char* what) {
  for (const PrecisionName& p : kNames)
    if (std::strcmp(text, p.name) == 0) return p.precision;
  fail(what, " must be fp32, amx or bf16 (got '", text, "')");
}

const char* matmul_precision_name(MatmulPrecision precision) {
  for (const PrecisionName& p : kNames)
    if (p.precision == precision) return p.name;
  return "fp32";
}

}  // namespace dllm::cpu
