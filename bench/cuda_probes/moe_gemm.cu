// Probe: the MoE dispatch and grouped GEMMs (kernels.h moe_sort / moe_grouped_gemm) on the
// LLaDA2-mini shape (256 experts, top 8, hidden 2048, expert width 512, the shared expert inside)
// without a model: µs per call, TFLOP/s and GB/s of the touched experts' weights, at the row
// counts of 1 / 8 / 32 / 128 requests of a 32-token block, under uniform routing and a skewed one
// (experts drawn with probability ~ 1 / rank, as a block's alike [MASK] rows crowd a few), and
// at 32 tokens a crowded one: every token's experts from the same 24 (what one request's decoding
// block touched in LLaDA2-mini's bench, 23.4 experts a layer), the case where the in-model
// expert GEMMs ran at ~1.9 TB/s. Prints a hash of each output's bits, so two runs (e.g.
// DLLM_MOE_SM90=0 and 1) can be compared.
//
// Standalone (not part of the CMake build); build here after `cmake --build build-gpu`:
//   nvcc -O3 -arch=sm_90 -std=c++20 -Isrc -Iinclude -o moe_gemm bench/cuda_probes/moe_gemm.cu \
//     build-gpu/libdllm_lib.a -lcudart
//   ./moe_gemm [REPS=20]
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/kernels.h"
#include "probe_check.cuh"

namespace {

constexpr int kExperts = 256, kTopK = 8, kHidden = 2048, kInter = 512;

// n uniform values in [-scale, scale), filled on the GPU (a host fill of the 1.6 GB of expert
// weights would take seconds of device time).
__global__ void fill_random(__nv_bfloat16* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = __float2bfloat16(scale * (float(z >> 40) * 0x1.0p-23f - 1.0f));
  }
}

template <class T>
T* device_random(size_t n, uint64_t seed, float scale) {
  T* p = nullptr;
  CK(cudaMalloc(&p, n * sizeof(T)));
  fill_random<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16*>(p), n, seed, scale);
  CK(cudaGetLastError());
  return p;
}

// Each token's k distinct experts: uniform, or drawn with probability ~ 1 / (rank + 1).
enum class Routing { kUniform, kSkewed, kCrowded };
constexpr int kCrowdedExperts = 24;

const char* routing_name(Routing r) {
  return r == Routing::kUniform ? "uniform" : r == Routing::kSkewed ? "skewed" : "crowded (24)";
}

std::vector<int32_t> route(int tokens, Routing routing, std::mt19937& rng) {
  std::vector<double> w(kExperts);
  for (int e = 0; e < kExperts; ++e)
    w[size_t(e)] = routing == Routing::kSkewed    ? 1.0 / (e + 1)
                   : routing == Routing::kCrowded ? (e % 10 == 3 && e / 10 < kCrowdedExperts)
                                                  : 1.0;
  std::discrete_distribution<int> pick(w.begin(), w.end());
  std::vector<int32_t> out;
  for (int t = 0; t < tokens; ++t) {
    std::set<int> chosen;
    while (int(chosen.size()) < kTopK) chosen.insert(pick(rng));
    out.insert(out.end(), chosen.begin(), chosen.end());
  }
  return out;
}

uint64_t hash_bits(const void* d, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  CK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
  uint64_t x = 1469598103934665603ull;
  for (unsigned char c : h) x = (x ^ c) * 1099511628211ull;
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  using dllm::cuda::bf16;
  const int reps = argc > 1 ? atoi(argv[1]) : 20;
  std::mt19937 rng(7);
  const int max_tokens = 4096;
  bf16* x = device_random<bf16>(size_t(max_tokens) * kHidden, 1, 1.0f);
  bf16* w_gate_up = device_random<bf16>(size_t(kExperts) * 2 * kInter * kHidden, 2, 0.03f);
  bf16* w_down = device_random<bf16>(size_t(kExperts) * kHidden * kInter, 3, 0.05f);
  bf16* s_gate_up = device_random<bf16>(size_t(2) * kInter * kHidden, 4, 0.03f);
  bf16* s_down = device_random<bf16>(size_t(kHidden) * kInter, 5, 0.05f);
  const size_t max_rows = size_t(max_tokens) * (kTopK + 1);
  int32_t *experts, *offsets, *order, *position, *work;
  bf16* act;
  float* y;
  CK(cudaMalloc(&experts, size_t(max_tokens) * kTopK * 4));
  CK(cudaMalloc(&offsets, (kExperts + 1) * 4));
  CK(cudaMalloc(&order, max_rows * 4));
  CK(cudaMalloc(&position, size_t(max_tokens) * kTopK * 4));
  CK(cudaMalloc(
      &work,
      dllm::cuda::moe_work_list_ints(int64_t(max_tokens) * kTopK, kExperts, max_tokens) * 4));
  int32_t* scratch;
  CK(cudaMalloc(&scratch,
                dllm::cuda::moe_sort_scratch_ints(int64_t(max_tokens) * kTopK, kExperts) * 4));
  CK(cudaMalloc(&act, max_rows * kInter * 2));
  CK(cudaMalloc(&y, max_rows * kHidden * 4));
  cudaEvent_t e0, e1, e2, e3;
  for (cudaEvent_t* ev : {&e0, &e1, &e2, &e3}) CK(cudaEventCreate(ev));
  printf(
      "| tokens | routing | experts touched | sort µs | gate_up+SwiGLU µs | down µs | TFLOP/s "
      "| weight GB/s | act hash | y hash |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const int tokens : {32, 256, 1024, 4096})
    for (const Routing routing : {Routing::kUniform, Routing::kSkewed, Routing::kCrowded}) {
      if (routing == Routing::kCrowded && tokens != 32) continue;
      const auto routed = route(tokens, routing, rng);
      CK(cudaMemcpy(experts, routed.data(), routed.size() * 4, cudaMemcpyHostToDevice));
      const int touched = int(std::set<int32_t>(routed.begin(), routed.end()).size());
      dllm::cuda::MoeGemmParams up;
      up.in = x;
      up.order = order;
      up.top_k = kTopK;
      up.offsets = offsets;
      up.work = work;
      up.assignments = tokens * kTopK;
      up.w = w_gate_up;
      up.experts = kExperts;
      up.n_out = 2 * kInter;
      up.k = kHidden;
      up.extra_w = s_gate_up;
      up.extra_rows = tokens;
      up.out = act;
      up.out_f32 = false;
      up.swiglu = true;
      dllm::cuda::MoeGemmParams down = up;
      down.in = act;
      down.order = nullptr;
      down.w = w_down;
      down.n_out = kHidden;
      down.k = kInter;
      down.extra_w = s_down;
      down.out = y;
      down.out_f32 = true;
      down.swiglu = false;
      float sort_ms = 0, up_ms = 0, down_ms = 0;
      for (int r = -2; r < reps; ++r) {  // two warm-ups
        CK(cudaEventRecord(e0));
        dllm::cuda::moe_sort(experts, tokens, kTopK, 0, kExperts, true, offsets, order, position,
                             work, scratch, nullptr);
        CK(cudaEventRecord(e1));
        dllm::cuda::moe_grouped_gemm(up, nullptr);
        CK(cudaEventRecord(e2));
        dllm::cuda::moe_grouped_gemm(down, nullptr);
        CK(cudaEventRecord(e3));
        CK(cudaEventSynchronize(e3));
        float a, b, c;
        CK(cudaEventElapsedTime(&a, e0, e1));
        CK(cudaEventElapsedTime(&b, e1, e2));
        CK(cudaEventElapsedTime(&c, e2, e3));
        if (r >= 0) {
          sort_ms += a / reps;
          up_ms += b / reps;
          down_ms += c / reps;
        }
      }
      const double rows = double(tokens) * (kTopK + 1);
      const double flops = rows * 3.0 * kHidden * kInter * 2.0;
      const double weight_bytes = (touched + 1) * 3.0 * kHidden * kInter * 2.0;
      printf("| %d | %s | %d | %.1f | %.1f | %.1f | %.0f | %.0f | %016llx | %016llx |\n", tokens,
             routing_name(routing), touched, sort_ms * 1e3, up_ms * 1e3, down_ms * 1e3,
             flops / ((up_ms + down_ms) * 1e-3) / 1e12,
             weight_bytes / ((up_ms + down_ms) * 1e-3) / 1e9,
             (unsigned long long)hash_bits(act, size_t(rows) * kInter * 2),
             (unsigned long long)hash_bits(y, size_t(rows) * kHidden * 4));
    }
  return 0;
}
