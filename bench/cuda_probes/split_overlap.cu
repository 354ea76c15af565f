// Probe: can a step's GEMMs (compute-bound at 512 rows) and its attention (memory-bound) overlap
// when the batch runs as two halves and the GPU's SMs are partitioned between a GEMM stream and
// an attention stream (green contexts)? SDAR-4B shapes, 36 layers, 128 sequences x 4 rows over
// 1056 keys each; the attention is a stand-in that streams the sequences' paged K/V.
//
// Standalone (not part of the CMake build); on a GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o split_overlap bench/cuda_probes/split_overlap.cu -lcublas
//   -lcuda
//   ./split_overlap
// Times 36 layers of: GEMMs alone (512 rows, and 2 x 256), the attention stand-in alone, the
// sequential whole batch, two halves on two plain streams (three priority settings), and two
// halves on green contexts of 16-48 attention SMs. Results: docs/benchmarks.md, 2026-11-30
// (second session).
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include "kv_stream_kernel.cuh"
#include "probe_check.cuh"

constexpr int STAGES = 3;
constexpr int LAYERS = 36, SEQS = 128, CTX = 1056, PAGE = 16, ROWS_PER_SEQ = 4;
constexpr int HID = 2560, QKV = 6144, QD = 4096, INTER = 9728;

struct Layer {
  __nv_bfloat16 *qkv, *o, *gu, *down, *k, *v;
};

int main(int argc, char** argv) {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  // Weights and K/V per layer.
  std::vector<Layer> L(LAYERS);
  const int pages_per_seq = (CTX + PAGE - 1) / PAGE, total_pages = SEQS * pages_per_seq + 8;
  const size_t kv_elems = (size_t)total_pages * PAGE * KVH * D;
  for (auto& l : L) {
    CK(cudaMalloc(&l.qkv, (size_t)QKV * HID * 2));
    CK(cudaMalloc(&l.o, (size_t)HID * QD * 2));
    CK(cudaMalloc(&l.gu, (size_t)2 * INTER * HID * 2));
    CK(cudaMalloc(&l.down, (size_t)HID * INTER * 2));
    CK(cudaMalloc(&l.k, kv_elems * 2));
    CK(cudaMalloc(&l.v, kv_elems * 2));
    cudaMemset(l.qkv, 0, (size_t)QKV * HID * 2);
    cudaMemset(l.o, 0, (size_t)HID * QD * 2);
    cudaMemset(l.gu, 0, (size_t)2 * INTER * HID * 2);
    cudaMemset(l.down, 0, (size_t)HID * INTER * 2);
    cudaMemset(l.k, 0, kv_elems * 2);
    cudaMemset(l.v, 0, kv_elems * 2);
  }
  std::vector<int> perm(total_pages);
  for (int i = 0; i < total_pages; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<int> slots((size_t)SEQS * CTX);
  for (int s = 0; s < SEQS; ++s)
    for (int j = 0; j < CTX; ++j)
      slots[(size_t)s * CTX + j] = perm[s * pages_per_seq + j / PAGE] * PAGE + j % PAGE;
  int* dslots;
  CK(cudaMalloc(&dslots, slots.size() * 4));
  CK(cudaMemcpy(dslots, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
  const int M = SEQS * ROWS_PER_SEQ;
  __nv_bfloat16 *x, *qkvo, *attn, *gu, *act, *y;
  float* junk;
  CK(cudaMalloc(&x, (size_t)M * HID * 2));
  CK(cudaMalloc(&qkvo, (size_t)M * QKV * 2));
  CK(cudaMalloc(&attn, (size_t)M * QD * 2));
  CK(cudaMalloc(&gu, (size_t)M * 2 * INTER * 2));
  CK(cudaMalloc(&act, (size_t)M * INTER * 2));
  CK(cudaMalloc(&y, (size_t)M * HID * 2));
  cudaMemset(x, 0, (size_t)M * HID * 2);
  cudaMemset(attn, 0, (size_t)M * QD * 2);
  cudaMemset(act, 0, (size_t)M * INTER * 2);
  CK(cudaMalloc(&junk, 1 << 22));
  const size_t smem = stream_kv_smem(STAGES);
  CK(cudaFuncSetAttribute(stream_kv<STAGES, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int)smem));

  cublasHandle_t h;
  CK(cublasCreate(&h));
  void* ws;
  CK(cudaMalloc(&ws, 32 << 20));
  CK(cublasSetWorkspace(h, ws, 32 << 20));
  const float one = 1, zero = 0;
  auto gemm = [&](cudaStream_t s, const __nv_bfloat16* a, const __nv_bfloat16* w,
                  __nv_bfloat16* out, int m, int n, int k) {
    CK(cublasSetStream(h, s));
    CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k, a, CUDA_R_16BF,
                    k, &zero, out, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  // Half h of the batch: rows [r0, r0 + m), sequences [s0, s0 + ns).
  auto qkv_gemm = [&](cudaStream_t s, int l, int r0, int m) {
    gemm(s, x + (size_t)r0 * HID, L[l].qkv, qkvo + (size_t)r0 * QKV, m, QKV, HID);
  };
  auto rest_gemms = [&](cudaStream_t s, int l, int r0, int m) {
    gemm(s, attn + (size_t)r0 * QD, L[l].o, y + (size_t)r0 * HID, m, HID, QD);
    gemm(s, x + (size_t)r0 * HID, L[l].gu, gu + (size_t)r0 * 2 * INTER, m, 2 * INTER, HID);
    gemm(s, act + (size_t)r0 * INTER, L[l].down, y + (size_t)r0 * HID, m, HID, INTER);
  };
  auto attention = [&](cudaStream_t s, int l, int s0, int ns) {
    stream_kv<STAGES, false>
        <<<ns * KVH * 4, 32, smem, s>>>(L[l].k, L[l].v, dslots, CTX, PAGE, 4, s0, junk);
  };

  cudaStream_t s0;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto timed = [&](const char* name, auto body) {
    for (int w = 0; w < 2; ++w) body();
    CK(cudaDeviceSynchronize());
    cudaEventRecord(e0, s0);
    body();
    const int reps = 5;
    for (int r = 1; r < reps; ++r) body();
    cudaEventRecord(e1, s0);
    CK(cudaEventSynchronize(e1));
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    printf("%-44s %8.3f ms per step (36 layers)\n", name, ms / reps);
  };

  // 0. GEMMs alone and attention alone, whole batch.
  timed("gemms alone (512 rows)", [&] {
    for (int l = 0; l < LAYERS; ++l) {
      qkv_gemm(s0, l, 0, M);
      rest_gemms(s0, l, 0, M);
    }
  });
  timed("gemms alone (2 x 256 rows)", [&] {
    for (int l = 0; l < LAYERS; ++l)
      for (int hh = 0; hh < 2; ++hh) {
        qkv_gemm(s0, l, hh * M / 2, M / 2);
        rest_gemms(s0, l, hh * M / 2, M / 2);
      }
  });
  timed("attention alone (128 seqs)", [&] {
    for (int l = 0; l < LAYERS; ++l) attention(s0, l, 0, SEQS);
  });
  // 1. Sequential whole batch.
  timed("sequential, whole batch", [&] {
    for (int l = 0; l < LAYERS; ++l) {
      qkv_gemm(s0, l, 0, M);
      attention(s0, l, 0, SEQS);
      rest_gemms(s0, l, 0, M);
    }
  });

  // 2/3. Two halves, a GEMM stream and an attention stream.
  std::vector<cudaEvent_t> ev(4 * LAYERS + 8);
  for (auto& e : ev) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  auto halves = [&](cudaStream_t gs, cudaStream_t as) {
    // start: both streams after s0
    cudaEventRecord(ev[0], s0);
    cudaStreamWaitEvent(gs, ev[0]);
    cudaStreamWaitEvent(as, ev[0]);
    int e = 1;
    const int hm = M / 2, hs = SEQS / 2;
    cudaEvent_t attA_prev = nullptr, attB_prev = nullptr;
    for (int l = 0; l < LAYERS; ++l) {
      // GEMM stream: A's rest of l-1 (after A's attention) and A's qkv of l; then B's.
      if (attA_prev) {
        cudaStreamWaitEvent(gs, attA_prev);
        rest_gemms(gs, l - 1, 0, hm);
      }
      qkv_gemm(gs, l, 0, hm);
      cudaEvent_t qA = ev[e++];
      cudaEventRecord(qA, gs);
      if (attB_prev) {
        cudaStreamWaitEvent(gs, attB_prev);
        rest_gemms(gs, l - 1, hm, hm);
      }
      qkv_gemm(gs, l, hm, hm);
      cudaEvent_t qB = ev[e++];
      cudaEventRecord(qB, gs);
      cudaStreamWaitEvent(as, qA);
      attention(as, l, 0, hs);
      attA_prev = ev[e++];
      cudaEventRecord(attA_prev, as);
      cudaStreamWaitEvent(as, qB);
      attention(as, l, hs, hs);
      attB_prev = ev[e++];
      cudaEventRecord(attB_prev, as);
    }
    cudaStreamWaitEvent(gs, attA_prev);
    rest_gemms(gs, LAYERS - 1, 0, hm);
    cudaStreamWaitEvent(gs, attB_prev);
    rest_gemms(gs, LAYERS - 1, hm, hm);
    cudaEventRecord(ev[e], gs);
    cudaStreamWaitEvent(s0, ev[e]);
    cudaEventRecord(ev[e + 1], as);
    cudaStreamWaitEvent(s0, ev[e + 1]);
  };
  cudaStream_t g1, a1;
  CK(cudaStreamCreateWithFlags(&g1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&a1, cudaStreamNonBlocking));
  timed("halves, two plain streams", [&] { halves(g1, a1); });
  int lo, hi;
  cudaDeviceGetStreamPriorityRange(&lo, &hi);
  cudaStream_t g2, a2;
  CK(cudaStreamCreateWithPriority(&g2, cudaStreamNonBlocking, hi));
  CK(cudaStreamCreateWithPriority(&a2, cudaStreamNonBlocking, lo));
  timed("halves, plain streams, GEMM high priority", [&] { halves(g2, a2); });
  cudaStream_t g3, a3;
  CK(cudaStreamCreateWithPriority(&g3, cudaStreamNonBlocking, lo));
  CK(cudaStreamCreateWithPriority(&a3, cudaStreamNonBlocking, hi));
  timed("halves, plain streams, attention high prio", [&] { halves(g3, a3); });

  // Green contexts.
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUdevResource all;
  CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  printf("SMs %u\n", all.sm.smCount);
  for (int attn_sms : {16, 24, 32, 40, 48}) {
    CUdevResource part;
    unsigned n = 1;
    CUdevResource rest;
    CUresult r = cuDevSmResourceSplitByCount(&part, &n, &all, &rest, 0, attn_sms);
    if (r != CUDA_SUCCESS || n < 1) {
      printf("split %d failed (%d)\n", attn_sms, (int)r);
      continue;
    }
    CUdevResourceDesc da, dg;
    CK(cuDevResourceGenerateDesc(&da, &part, 1));
    CK(cuDevResourceGenerateDesc(&dg, &rest, 1));
    CUgreenCtx ca, cg;
    CK(cuGreenCtxCreate(&ca, da, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CK(cuGreenCtxCreate(&cg, dg, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUstream sa, sg;
    CK(cuGreenCtxStreamCreate(&sa, ca, CU_STREAM_NON_BLOCKING, 0));
    CK(cuGreenCtxStreamCreate(&sg, cg, CU_STREAM_NON_BLOCKING, 0));
    char name[96];
    snprintf(name, sizeof name, "halves, green: attention %u SMs, GEMM %u", part.sm.smCount,
             rest.sm.smCount);
    timed(name, [&] { halves((cudaStream_t)sg, (cudaStream_t)sa); });
    snprintf(name, sizeof name, "  attention alone on %u SMs", part.sm.smCount);
    timed(name, [&] {
      cudaEventRecord(ev[0], s0);
      cudaStreamWaitEvent((cudaStream_t)sa, ev[0]);
      for (int l = 0; l < LAYERS; ++l) attention((cudaStream_t)sa, l, 0, SEQS);
      cudaEventRecord(ev[1], (cudaStream_t)sa);
      cudaStreamWaitEvent(s0, ev[1]);
    });
    snprintf(name, sizeof name, "  gemms 2x256 alone on %u SMs", rest.sm.smCount);
    timed(name, [&] {
      cudaEventRecord(ev[0], s0);
      cudaStreamWaitEvent((cudaStream_t)sg, ev[0]);
      for (int l = 0; l < LAYERS; ++l)
        for (int hh = 0; hh < 2; ++hh) {
          qkv_gemm((cudaStream_t)sg, l, hh * M / 2, M / 2);
          rest_gemms((cudaStream_t)sg, l, hh * M / 2, M / 2);
        }
      cudaEventRecord(ev[1], (cudaStream_t)sg);
      cudaStreamWaitEvent(s0, ev[1]);
    });
  }
  return 0;
}
