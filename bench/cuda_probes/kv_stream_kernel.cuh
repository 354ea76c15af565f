// The K/V streaming kernel both probes time (kv_stream.cu, split_overlap.cu): the batched
// attention's access pattern without its math. One one-warp block per (sequence, KV head, split)
// item — item = (sequence * KV heads + head) * splits + split, sequences from seq0 — copies its
// keys' paged K and V rows in 32-key tiles by cp.async, STAGES deep (the lane owning a key reads
// its slot and shuffles it to the copies, as the real kernel), and uses them trivially.
// Dynamic shared memory: stream_kv_smem(STAGES) bytes.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

constexpr int D = 128, KVH = 8, KT = 32, STRIDE = D + 8;

constexpr size_t stream_kv_smem(int stages) {
  return static_cast<size_t>(stages) * 2 * KT * STRIDE * sizeof(__nv_bfloat16);
}

__device__ __forceinline__ void cp16(void* s, const void* g, bool ok) {
  unsigned sa = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g),
               "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void commit() {
  asm volatile("cp.async.commit_group;\n");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// HEAD_MAJOR: the pool holds [page][KV head][page offset][dim] instead of dllm's
// [slot][KV head][dim]. slots: each sequence's ctx physical slots.
template <int STAGES, bool HEAD_MAJOR>
__global__ void __launch_bounds__(32)
    stream_kv(const __nv_bfloat16* k, const __nv_bfloat16* v, const int* slots, int ctx, int page,
              int splits, int seq0, float* out) {
  extern __shared__ __align__(16) __nv_bfloat16 sm[];
  const int item = blockIdx.x;
  const int split = item % splits, g = (item / splits) % KVH, seq = seq0 + item / splits / KVH;
  const int per = (ctx + splits - 1) / splits;
  const int kb = split * per, ke = min(ctx, kb + per);
  const int lane = threadIdx.x, chunk = lane % 16;
  const int* sl = slots + (size_t)seq * ctx;
  const int n_tiles = (ke - kb + KT - 1) / KT;
  auto addr = [&](int slot) -> size_t {
    if (HEAD_MAJOR) return ((size_t)(slot / page) * KVH + g) * page * D + (size_t)(slot % page) * D;
    return ((size_t)slot * KVH + g) * D;
  };
  auto load = [&](int st, int t0) {
    const bool ok = t0 + lane < ke;
    const int slot = ok ? __ldg(sl + t0 + lane) : 0;
    __nv_bfloat16* kd = sm + st * 2 * KT * STRIDE + chunk * 8;
    __nv_bfloat16* vd = kd + KT * STRIDE;
#pragma unroll
    for (int r0 = 0; r0 < KT; r0 += 2) {
      const int kr = r0 + lane / 16;
      const int s = __shfl_sync(0xffffffffu, slot, kr);
      const bool valid = t0 + kr < ke;
      const size_t a = addr(s) + chunk * 8;
      cp16(kd + kr * STRIDE, k + a, valid);
      cp16(vd + kr * STRIDE, v + a, valid);
    }
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_tiles) load(s, kb + s * KT);
    commit();
  }
  float acc = 0;
  for (int it = 0; it < n_tiles; ++it) {
    if (it + STAGES - 1 < n_tiles) load((it + STAGES - 1) % STAGES, kb + (it + STAGES - 1) * KT);
    commit();
    wait<STAGES - 1>();
    __syncwarp();
    const __nv_bfloat16* kd = sm + (it % STAGES) * 2 * KT * STRIDE;
    acc += __bfloat162float(kd[lane * STRIDE + (it & 127)]) +
           __bfloat162float(kd[KT * STRIDE + lane * STRIDE]);
    __syncwarp();
  }
  if (acc == 12345.f) out[item] = acc;  // never: keeps the loads
}
