// Inline PTX for Hopper's bulk asynchronous copies (sm_90+): a row of global memory into shared
// memory by the copy engine (cp.async.bulk, "TMA" without a tensor map), its completion counted in
// bytes on a shared-memory mbarrier. Why the attention kernels use it: cp.async moves 16 bytes per
// thread through the L1's miss tracking, which bounds the bytes a SM keeps in flight; a bulk copy
// of a 256-byte K or V row is one instruction and bypasses it.
#pragma once

#include <cstdint>

namespace dllm::cuda::ptx {

// The instructions exist from sm_90 on; for earlier targets the functions are empty (the kernels
// never call them there: their kBulkCompiled is false), but declared, for the kernels' name lookup.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DLLM_BULK_PTX(...) asm volatile(__VA_ARGS__)
#else
#define DLLM_BULK_PTX(...) \
  do {                     \
  } while (0)
#endif

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// An mbarrier expecting `arrivals` arrivals per phase. Then a barrier (fence + __syncthreads)
// before any other thread uses it.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int arrivals) {
  DLLM_BULK_PTX("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(arrivals));
}
__device__ __forceinline__ void fence_mbarrier_init() {
  DLLM_BULK_PTX("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` more bytes of copies in the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  DLLM_BULK_PTX("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
                "r"(bytes)
                : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  DLLM_BULK_PTX(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// Orders this thread's earlier generic-proxy accesses to shared memory before later bulk copies
// (the async proxy) into it: a stage's buffers were read (and may have been zeroed) by threads
// before the copy engine refills them.
__device__ __forceinline__ void fence_proxy_async_shared() {
  DLLM_BULK_PTX("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
// completing on `bar`.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes,
                                                    uint64_t* bar) {
  DLLM_BULK_PTX(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

}  // namespace dllm::cuda::ptx

#undef DLLM_BULK_PTX
