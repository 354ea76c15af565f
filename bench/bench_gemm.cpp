// The batch-invariant GEMM (backend/cpu/gemm_f32.h) against OpenBLAS cblas_sgemm on the shapes of
// the CPU forward: the embedded tiny-block model (hidden 256, 8 × 32 query heads, 2 KV heads,
// intermediate 768, vocab 4096) at 4..512 rows, and the Qwen3-0.6B benchmark model
// (configs/qwen3-0.6b-sdar.json: hidden 1024, 16 × 128 query heads, intermediate 3072) at a
// denoising step's 4-32 rows and a 512-row prefill. Each case runs on 1 and on 2 threads (our pool
// and OpenMP alike), and ours also with bf16 weights (widened in registers, gemm_nt) and, where the
// CPU has AVX512-BF16, the opt-in bf16 dot-product GEMM ("dot-bf16", gemm_bf16.h).
//
//   build/bench/bench_gemm [--benchmark_filter=tiny] [--benchmark_min_time=0.3]
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_f32.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace {

struct Projection {
  const char* name;  // model/weight
  int n, k;
};

constexpr Projection kTiny[] = {{"tiny/q,o", 256, 256},
                                {"tiny/k,v", 64, 256},
                                {"tiny/gate,up", 768, 256},
                                {"tiny/down", 256, 768},
                                {"tiny/lm_head", 4096, 256}};
constexpr int kTinyRows[] = {4, 32, 128, 512};
constexpr Projection kQwen[] = {{"qwen0.6b/q", 2048, 1024},
                                {"qwen0.6b/o", 1024, 2048},
                                {"qwen0.6b/gate,up", 3072, 1024},
                                {"qwen0.6b/down", 1024, 3072}};
constexpr int kQwenRows[] = {4, 8, 16, 32, 512};

using dllm::cpu::GemmKernel;
constexpr GemmKernel kSimdKernels[] = {GemmKernel::kAvx2, GemmKernel::kAvx512,
                                       GemmKernel::kAvx512Wide};

// kernel: one of ours, or none for OpenBLAS (or the bf16 dot-product GEMM when dot_bf16).
// bf16: ours over bf16 weights (ignored for OpenBLAS).
void run_gemm(benchmark::State& state, std::optional<GemmKernel> kernel, Projection p, int m,
              int threads, bool bf16, bool dot_bf16) {
  std::vector<float> a(size_t(m) * p.k, 0.5f), w(size_t(p.n) * p.k, 0.25f), out(size_t(m) * p.n);
  const std::vector<uint16_t> w16(w.size(), dllm::f32_to_bf16(0.25f));
  const int saved = dllm::num_threads();
  dllm::set_num_threads(threads);
  for (auto _ : state) {
    if (dot_bf16)
      dllm::cpu::gemm_nt_bf16(a.data(), p.k, w16.data(), p.k, out.data(), p.n, m, p.n, p.k, false);
    else if (kernel && bf16)
      dllm::cpu::gemm_nt_on(*kernel, a.data(), p.k, dllm::DType::kBF16, w16.data(), p.k, out.data(),
                            p.n, m, p.n, p.k, false);
    else if (kernel)
      dllm::cpu::gemm_nt_f32_on(*kernel, a.data(), p.k, w.data(), p.k, out.data(), p.n, m, p.n, p.k,
                                false);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, p.n, p.k, 1.0f, a.data(), p.k,
                  w.data(), p.k, 0.0f, out.data(), p.n);
    benchmark::DoNotOptimize(out.data());
  }
  dllm::set_num_threads(saved);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * p.n * p.k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void register_case(const Projection& p, int m, int threads, std::optional<GemmKernel> kernel,
                   bool bf16 = false, bool dot_bf16 = false) {
  const std::string name = std::string(p.name) + "/m=" + std::to_string(m) +
                           "/threads=" + std::to_string(threads) + "/" +
                           (dot_bf16 ? "dot-bf16"
                            : kernel ? dllm::cpu::gemm_kernel_name(*kernel)
                                     : "openblas") +
                           (bf16 && !dot_bf16 ? "-bf16" : "");
  benchmark::RegisterBenchmark(name.c_str(), run_gemm, kernel, p, m, threads, bf16, dot_bf16)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}

void register_cases(const Projection& p, int m) {
  for (const int threads : {1, 2}) {
    for (const GemmKernel kernel : kSimdKernels)
      if (dllm::cpu::gemm_kernel_available(kernel)) {
        register_case(p, m, threads, kernel);
        register_case(p, m, threads, kernel, /*bf16=*/true);
      }
    if (dllm::cpu::gemm_bf16_available())
      register_case(p, m, threads, std::nullopt, /*bf16=*/true, /*dot_bf16=*/true);
    register_case(p, m, threads, std::nullopt);
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (const Projection& p : kTiny)
    for (const int m : kTinyRows) register_cases(p, m);
  for (const Projection& p : kQwen)
    for (const int m : kQwenRows) register_cases(p, m);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
