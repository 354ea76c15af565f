// Probe: a tensor-parallel layer's in-place fp32 all-reduce (rows x hidden, as dllm's o / down
// projections sum their partials) inside a CUDA graph, on buffers from three sources:
//   cudaMalloc       — dllm's activations today;
//   ncclMemAlloc     — VMM memory NCCL can register on its own when the graph is captured;
//   symmetric window — ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC), which
//                      lets NCCL 2.27+ run its symmetric-memory kernels.
// One process, one thread per GPU (communicators from ncclCommInitAll), 100 all-reduces captured
// in one graph and replayed; microseconds per all-reduce, rank 0's events. Also checks the sum.
//
// Standalone (not part of the CMake build):
//   nvcc -O2 -arch=sm_90 -std=c++20 -o allreduce_window bench/cuda_probes/allreduce_window.cu \
//        -lnccl
//   NCCL_NVLS_ENABLE=0 ./allreduce_window [world=2] [hidden=4096]
// Results: docs/benchmarks.md, 2026-11-30 (seventh session).
#include <cuda_runtime.h>
#include <nccl.h>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <thread>
#include <vector>

#include "probe_check.cuh"

__global__ void fill(float* x, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = v + float(i % 7);
}

enum Source { kCudaMalloc, kNcclMemAlloc, kWindow };

int main(int argc, char** argv) {
  const int world = argc > 1 ? atoi(argv[1]) : 2;
  const int hidden = argc > 2 ? atoi(argv[2]) : 4096;
  const int rows_list[] = {4, 32, 128, 512, 1024, 2048, 4096};
  constexpr int kSizes = static_cast<int>(std::size(rows_list));
  const int calls = 100;
  std::vector<ncclComm_t> comms(world);
  std::vector<int> devs(world);
  for (int r = 0; r < world; ++r) devs[r] = r;
  CK(ncclCommInitAll(comms.data(), world, devs.data()));
  int version = 0;
  ncclGetVersion(&version);
  printf("NCCL %d, world %d, hidden %d, fp32 in place, %d all-reduces in one graph\n", version,
         world, hidden, calls);
  printf("| rows | MB | cudaMalloc us | ncclMemAlloc us | symmetric window us | sum ok |\n");
  std::barrier sync(world);
  const size_t max_count = size_t(4096) * hidden;
  std::vector<std::vector<double>> us(kSizes, std::vector<double>(3, 0));
  std::vector<int> ok(kSizes, 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      CK(cudaSetDevice(r));
      cudaStream_t stream;
      CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      for (int src = 0; src < 3; ++src) {
        float* buf = nullptr;
        ncclWindow_t win = nullptr;
        if (src == kCudaMalloc)
          CK(cudaMalloc(&buf, max_count * sizeof(float)));
        else
          CK(ncclMemAlloc(reinterpret_cast<void**>(&buf), max_count * sizeof(float)));
        if (src == kWindow)
          CK(ncclCommWindowRegister(comms[r], buf, max_count * sizeof(float), &win,
                                    NCCL_WIN_COLL_SYMMETRIC));
        sync.arrive_and_wait();
        for (int ri = 0; ri < kSizes; ++ri) {
          const size_t count = size_t(rows_list[ri]) * hidden;
          // Correctness: one all-reduce of rank-dependent values.
          fill<<<256, 256, 0, stream>>>(buf, count, float(r + 1));
          CK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comms[r], stream));
          std::vector<float> host(count);
          CK(cudaMemcpyAsync(host.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost,
                             stream));
          CK(cudaStreamSynchronize(stream));
          const float base = world * (world + 1) / 2.0f;
          for (size_t i = 0; i < count; i += 97)
            if (host[i] != base + world * float(i % 7)) ok[ri] = 0;
          sync.arrive_and_wait();
          cudaGraph_t graph;
          cudaGraphExec_t exec;
          CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
          for (int c = 0; c < calls; ++c)
            CK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comms[r], stream));
          CK(cudaStreamEndCapture(stream, &graph));
          CK(cudaGraphInstantiate(&exec, graph, 0));
          CK(cudaGraphLaunch(exec, stream));  // warm-up
          CK(cudaStreamSynchronize(stream));
          sync.arrive_and_wait();
          cudaEvent_t a, b;
          CK(cudaEventCreate(&a));
          CK(cudaEventCreate(&b));
          double best = 1e30;
          for (int rep = 0; rep < 3; ++rep) {
            sync.arrive_and_wait();
            CK(cudaEventRecord(a, stream));
            CK(cudaGraphLaunch(exec, stream));
            CK(cudaEventRecord(b, stream));
            CK(cudaStreamSynchronize(stream));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, a, b));
            if (ms * 1e3 / calls < best) best = ms * 1e3 / calls;
          }
          if (r == 0) us[ri][src] = best;
          CK(cudaGraphExecDestroy(exec));
          CK(cudaGraphDestroy(graph));
          CK(cudaEventDestroy(a));
          CK(cudaEventDestroy(b));
        }
        sync.arrive_and_wait();
        if (win) CK(ncclCommWindowDeregister(comms[r], win));
        if (src == kCudaMalloc)
          CK(cudaFree(buf));
        else
          CK(ncclMemFree(buf));
        sync.arrive_and_wait();
      }
    });
  for (auto& t : threads) t.join();
  for (int ri = 0; ri < kSizes; ++ri)
    printf("| %d | %.1f | %.1f | %.1f | %.1f | %s |\n", rows_list[ri],
           rows_list[ri] * double(hidden) * 4 / 1e6, us[ri][0], us[ri][1], us[ri][2],
           ok[ri] ? "yes" : "NO");
  for (auto c : comms) ncclCommDestroy(c);
  return 0;
}
