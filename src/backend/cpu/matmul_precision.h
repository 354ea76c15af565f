// How the CPU forward multiplies activations by bf16 weights (`--cpu-matmul`), process-wide like
// the thread count. matmul_nt (cpu_weight.h) dispatches on it.
#pragma once

namespace dllm::cpu {

enum class MatmulPrecision {
  kFp32,  // exact fp32 products on the FMA kernels (gemm_f32.h): the same bits on every CPU
  // Exact fp32 products on AMX tiles (gemm_amx.h) for the weight matrices amx_pays_off(), the FMA
  // kernels for the rest: fp32 accuracy, its own order of additions; the default where the CPU
  // has AMX-BF16 (else kFp32).
  kAmx,
  kBf16,  // activations rounded to bf16, AVX512-BF16 dot products (gemm_bf16.h)
};

// Sets the precision; kBf16 on a CPU without AVX512-BF16, or kAmx without AMX-BF16, is an Error
// naming `what`. fp32 and f16 weights (and attention's fp32 products) always stay on the exact
// fp32 GEMM.
void set_matmul_precision(MatmulPrecision precision, const char* what = "--cpu-matmul");
MatmulPrecision matmul_precision();  // the one set, else the default above
// "fp32" / "amx" / "bf16" -> the precision; anything else an Error naming `what` and the choices.
MatmulPrecision parse_matmul_precision(const char* text, const char* what = "--cpu-matmul");
const char* matmul_precision_name(MatmulPrecision precision);  // parse_matmul_precision's inverse

}  // namespace dllm::cpu
