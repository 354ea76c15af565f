// Probe: how fast can one-warp blocks stream paged K/V for (sequence, KV head) items, with the
// pool laid out slot-major ([slot][kv_head][dim], dllm today) or head-major within a page
// ([page][kv_head][page offset][dim])? 128 sequences x CTX keys, 8 KV heads, dim 128, bf16,
// pages of PAGE slots in random order. Each block: cp.async 32-key tiles (K and V), STAGES deep,
// a trivial reduction so the loads are used.
//
// Standalone (not part of the CMake build); on a GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o kv_stream bench/cuda_probes/kv_stream.cu
//   ./kv_stream [CTX=1056]
// Results: docs/benchmarks.md, 2026-11-30 (second session).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include "kv_stream_kernel.cuh"
#include "probe_check.cuh"

int main(int argc, char** argv) {
  const int ctx = argc > 1 ? atoi(argv[1]) : 1056;
  const int seqs = 128, page = 16;
  const int pages_per_seq = (ctx + page - 1) / page;
  const int total_pages = seqs * pages_per_seq + 64;
  std::vector<int> perm(total_pages);
  for (int i = 0; i < total_pages; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<int> slots((size_t)seqs * ctx);
  for (int s = 0; s < seqs; ++s)
    for (int j = 0; j < ctx; ++j)
      slots[(size_t)s * ctx + j] = perm[s * pages_per_seq + j / page] * page + j % page;
  size_t elems = (size_t)total_pages * page * KVH * D;
  __nv_bfloat16 *k, *v;
  int* ds;
  float* out;
  CK(cudaMalloc(&k, elems * 2));
  CK(cudaMalloc(&v, elems * 2));
  CK(cudaMemset(k, 0, elems * 2));
  CK(cudaMemset(v, 0, elems * 2));
  CK(cudaMalloc(&ds, slots.size() * 4));
  CK(cudaMemcpy(ds, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&out, 1 << 20));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const double bytes = (double)seqs * ctx * KVH * D * 2 * 2;
  // copy bandwidth reference
  {
    void* big;
    size_t n = 2ull << 30;
    CK(cudaMalloc(&big, n));
    cudaMemcpy(big, (char*)big + n / 2, n / 2, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0);
    for (int i = 0; i < 5; ++i)
      cudaMemcpy(big, (char*)big + n / 2, n / 2, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    printf("copy %.0f GB/s (read+write)\n", 2.0 * (n / 2) * 5 / (ms * 1e-3) / 1e9);
    cudaFree(big);
  }
  auto run = [&](auto kernel, int stages, int splits, const char* name) {
    size_t smem = stream_kv_smem(stages);
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int items = seqs * KVH * splits;
    for (int i = 0; i < 3; ++i) kernel<<<items, 32, smem>>>(k, v, ds, ctx, page, splits, 0, out);
    CK(cudaDeviceSynchronize());
    cudaEventRecord(e0);
    for (int i = 0; i < 20; ++i) kernel<<<items, 32, smem>>>(k, v, ds, ctx, page, splits, 0, out);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    double us = ms * 1000 / 20;
    printf("%-12s stages %d splits %d: %7.1f us  %6.0f GB/s\n", name, stages, splits, us,
           bytes / (us * 1e-6) / 1e9);
  };
  for (int splits : {1, 2, 4}) {
    run(stream_kv<3, false>, 3, splits, "slot-major");
    run(stream_kv<3, true>, 3, splits, "head-major");
    run(stream_kv<4, false>, 4, splits, "slot-major");
    run(stream_kv<4, true>, 4, splits, "head-major");
  }
  return 0;
}
