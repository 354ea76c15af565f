// Probe: how fast can the MoE grouped GEMM's blocks stream the touched experts' weights when a
// step touches few of them? One request's LLaDA2-mini decoding step touches ~24 experts a layer,
// and the in-model gate/up GEMM moved their 100 MB at ~1.9 TB/s (Nsight Compute, 2026-11-30)
// while the kernel reaches 3.5–3.7 TB/s over 110–165 experts. This streams the gate/up weights
// (256 experts x 1024 rows x 2048 k, bf16) as the GEMM's blocks do — a block per (expert, tile of
// COLS weight rows), k in chunks of 64 through a STAGES-deep cp.async ring, no math but a sum that
// keeps the loads — for E touched experts spread over the 256, with the weights
//   row-major (dllm today): a chunk is COLS pieces of 128 bytes, 4 KB apart;
//   tiled: the same chunk stored as one contiguous COLS x 128-byte run.
// If tiled streams much faster at E = 24, a tiled expert layout is the lever; if both stall, the
// blocks are too few (more stages, narrower tiles); if both run near copy speed, the in-model
// loss lies outside the GEMM's loads.
//
// Standalone (not part of the CMake build); on a GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o expert_stream bench/cuda_probes/expert_stream.cu
//   ./expert_stream [REPS=50]
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.cuh"

namespace {

constexpr int kExperts = 256, kRows = 1024, kK = 2048, kChunk = 64;  // k per chunk
constexpr int kThreads = 256;
constexpr size_t kExpertElems = size_t(kRows) * kK;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Block b: touched expert experts[b / tiles], weight rows (b % tiles) * COLS ...
template <int COLS, int STAGES, bool TILED>
__global__ void __launch_bounds__(kThreads)
    stream_kernel(const __nv_bfloat16* w, const int* experts, float* sink) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int tiles = kRows / COLS, chunks = kK / kChunk;
  constexpr int vecs = COLS * kChunk / 8;  // 16-byte copies a chunk
  constexpr int chunk_bytes = COLS * kChunk * 2;
  const int e = experts[blockIdx.x / tiles], tile = blockIdx.x % tiles;
  const __nv_bfloat16* base = w + size_t(e) * kExpertElems;
  auto load = [&](int c) {
    unsigned char* stage = smem + (c % STAGES) * chunk_bytes;
    for (int v = threadIdx.x; v < vecs; v += kThreads) {
      const int r = v / (kChunk / 8), q = v % (kChunk / 8);
      const __nv_bfloat16* src =
          TILED ? base + (size_t(tile) * chunks + c) * COLS * kChunk + size_t(v) * 8
                : base + size_t(tile * COLS + r) * kK + c * kChunk + q * 8;
      cp_async16(stage + v * 16, src);
    }
    commit();
  };
  for (int s = 0; s < STAGES - 1; ++s) load(s);
  float acc = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    wait_groups<STAGES - 2>();
    __syncthreads();
    if (c + STAGES - 1 < chunks) {
      load(c + STAGES - 1);
    } else {
      commit();  // an empty group keeps the count
    }
    const unsigned char* stage = smem + (c % STAGES) * chunk_bytes;
    acc += __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(stage)[threadIdx.x]);
  }
  if (acc == 12345.0f) sink[blockIdx.x] = acc;  // never: the loads stay live
}

template <int COLS, int STAGES, bool TILED>
double run(const __nv_bfloat16* w, const int* experts, int touched, float* sink, int reps) {
  constexpr int smem = STAGES * COLS * kChunk * 2;
  auto* k = stream_kernel<COLS, STAGES, TILED>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int blocks = touched * (kRows / COLS);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) k<<<blocks, kThreads, smem>>>(w, experts, sink);
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) k<<<blocks, kThreads, smem>>>(w, experts, sink);
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  const double us = 1e3 * ms / reps;
  const double bytes = double(touched) * kExpertElems * 2;
  std::printf("| %d | %s | %d | %d | %d | %.1f | %.0f |\n", touched, TILED ? "tiled" : "row-major",
              COLS, STAGES, blocks, us, bytes / (us * 1e-6) / 1e9);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  __nv_bfloat16* w = nullptr;
  float* sink = nullptr;
  int* experts = nullptr;
  CK(cudaMalloc(&w, size_t(kExperts) * kExpertElems * 2));
  CK(cudaMemset(w, 0, size_t(kExperts) * kExpertElems * 2));
  CK(cudaMalloc(&sink, 1 << 20));
  CK(cudaMalloc(&experts, kExperts * sizeof(int)));
  std::printf(
      "| experts | layout | rows a block | stages | blocks | µs | GB/s |\n"
      "|---|---|---|---|---|---|---|\n");
  for (const int touched : {24, 64, 163}) {
    std::vector<int> ids(static_cast<size_t>(touched));  // spread over the 256, as routing leaves them
    for (int i = 0; i < touched; ++i) ids[size_t(i)] = (i * 256 / touched + 3) % kExperts;
    CK(cudaMemcpy(experts, ids.data(), ids.size() * sizeof(int), cudaMemcpyHostToDevice));
    run<128, 3, false>(w, experts, touched, sink, reps);  // today's gate/up blocks
    run<128, 3, true>(w, experts, touched, sink, reps);
    run<128, 6, false>(w, experts, touched, sink, reps);
    run<128, 6, true>(w, experts, touched, sink, reps);
    run<64, 4, false>(w, experts, touched, sink, reps);
    run<64, 4, true>(w, experts, touched, sink, reps);
    run<32, 8, false>(w, experts, touched, sink, reps);
    run<32, 8, true>(w, experts, touched, sink, reps);
  }
  return 0;
}
