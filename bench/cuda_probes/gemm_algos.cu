// Probe: cublasGemmEx default vs the best cuBLASLt algorithm (of the heuristic's top N) on the
// transformer's projection shapes. out[m,n] = a[m,k] · w[n,k]^T. Also checks each algo twice for
// bitwise repeatability.
//
// Standalone (not part of the CMake build); on a GPU machine:
//   nvcc -O2 -arch=sm_90 -o gemm_algos bench/cuda_probes/gemm_algos.cu -lcublasLt -lcublas
//   ./gemm_algos [TOP_N=32] [SHAPE_PREFIX]
// Prints per shape and row count the default's and the best algorithm's microseconds, their ratio,
// how many algorithms the heuristic offered, the split-K of the best, and whether every algorithm
// repeated its bits. Results: docs/benchmarks.md, 2026-11-30 (second session).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "probe_check.cuh"

struct Shape {
  const char* name;
  int n, k;
  bool f32out, acc;
};

__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995;
    h ^= h >> 15;
    p[i] = __float2bfloat16(((h & 0xffff) / 65536.0f - 0.5f) * 0.1f);
  }
}

int main(int argc, char** argv) {
  int topn = argc > 1 ? atoi(argv[1]) : 32;
  std::vector<Shape> shapes = {{"4b/qkv", 6144, 2560, true, false},
                               {"4b/o", 2560, 4096, true, true},
                               {"4b/gate_up", 19456, 2560, false, false},
                               {"4b/down", 2560, 9728, true, true},
                               {"4b/lm_head", 151936, 2560, true, false},
                               {"8b/qkv", 6144, 4096, true, false},
                               {"8b/o", 4096, 4096, true, true},
                               {"8b/gate_up", 24576, 4096, false, false},
                               {"8b/down", 4096, 12288, true, true},
                               {"llada2-mini/lm_head", 157184, 2048, true, false}};
  std::vector<int> ms = {4, 32, 128, 256, 320, 512, 640, 1024, 2048, 4096};
  cublasHandle_t h;
  CK(cublasCreate(&h));
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  size_t ws_bytes = 64 << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  CK(cublasSetWorkspace(h, ws, ws_bytes));
  __nv_bfloat16 *a, *w;
  void *out, *ref;
  size_t maxa = 4096ull * 12288, maxw = 151936ull * 4096, maxo = 4096ull * 151936;
  CK(cudaMalloc(&a, maxa * 2));
  CK(cudaMalloc(&w, maxw * 2));
  CK(cudaMalloc(&out, maxo * 4));
  CK(cudaMalloc(&ref, maxo * 4));
  fill<<<(maxa + 255) / 256, 256>>>(a, maxa, 1);
  fill<<<(maxw + 255) / 256, 256>>>(w, maxw, 2);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<char> host1(maxo * 4), host2(maxo * 4);
  printf("shape m default_us best_lt_us gain algos_tried best_idx splitk det_all\n");
  const char* only = argc > 2 ? argv[2] : "";
  for (const Shape& s : shapes)
    for (int m : ms) {
      if (std::strncmp(s.name, only, std::strlen(only)) != 0) continue;
      if (s.n > 100000 && m > 1024) continue;
      const float alpha = 1, beta = s.acc ? 1 : 0;
      cudaDataType_t ot = s.f32out ? CUDA_R_32F : CUDA_R_16BF;
      auto run_default = [&] {
        CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, w, CUDA_R_16BF, s.k, a,
                        CUDA_R_16BF, s.k, &beta, out, ot, s.n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
      };
      int reps = 20;
      auto time = [&](auto fn) {
        for (int i = 0; i < 3; ++i) fn();
        cudaEventRecord(e0);
        for (int i = 0; i < reps; ++i) fn();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms_ = 0;
        cudaEventElapsedTime(&ms_, e0, e1);
        return 1000.0 * ms_ / reps;
      };
      double tdef = time(run_default);
      cublasLtMatmulDesc_t op;
      CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      cublasLtMatrixLayout_t la, lb, lc;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.n, s.k));
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, m, s.k));
      CK(cublasLtMatrixLayoutCreate(&lc, ot, s.n, m, s.n));
      cublasLtMatmulPreference_t pref;
      CK(cublasLtMatmulPreferenceCreate(&pref));
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &ws_bytes, sizeof ws_bytes));
      std::vector<cublasLtMatmulHeuristicResult_t> res(topn);
      int got = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, topn, res.data(), &got));
      double best = 1e30;
      int bi = -1;
      int splitk_best = 0;
      bool det_all = true;
      for (int i = 0; i < got; ++i) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        auto fn = [&] {
          CK(cublasLtMatmul(lt, op, &alpha, w, la, a, lb, &beta, out, lc, out, lc, &res[i].algo, ws,
                            ws_bytes, 0));
        };
        double t = time(fn);
        // repeatability: two runs from zeroed out
        size_t ob = (size_t)m * s.n * (s.f32out ? 4 : 2);
        cudaMemset(out, 0, ob);
        fn();
        cudaMemcpy(host1.data(), out, ob, cudaMemcpyDeviceToHost);
        cudaMemset(out, 0, ob);
        fn();
        cudaMemcpy(host2.data(), out, ob, cudaMemcpyDeviceToHost);
        if (memcmp(host1.data(), host2.data(), ob) != 0) det_all = false;
        if (t < best) {
          best = t;
          bi = i;
          int sk = 0;
          size_t sz;
          cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk,
                                               sizeof sk, &sz);
          splitk_best = sk;
        }
      }
      printf("%s %d %.1f %.1f %.3f %d %d %d %d\n", s.name, m, tdef, best, tdef / best, got, bi,
             splitk_best, det_all ? 1 : 0);
      fflush(stdout);
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(op);
    }
  return 0;
}
