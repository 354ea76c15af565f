// Shared-memory barriers (mbarrier, sm_90) and named block barriers: how the producer and consumer
// warpgroups of attention_ws_sm90.cu hand pipeline stages to each other without stopping the
// whole block. Addresses are shared-memory (cvta) addresses of 8-byte-aligned words.
#pragma once

#include <cstdint>

namespace dllm::cuda::mbarrier {

// `count` arrivals complete a phase.
__device__ __forceinline__ void init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// One arrival (release: this thread's earlier writes are visible to whoever waits on the phase).
__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits (acquire) until the phase of the given parity has completed: phases alternate 0, 1, 0, ...
// so the k-th use of a barrier waits for parity k & 1.
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

}  // namespace dllm::cuda::mbarrier

namespace dllm::cuda::named_barrier {

// bar.sync on barrier `id` (1..15; 0 is __syncthreads) for `threads` threads (a multiple of 32).
__device__ __forceinline__ void sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace dllm::cuda::named_barrier
