// The selection's top-k per KV head (sparse_select.h: sparse_top_k): a radix select over the
// scores' order-preserving bits, spread over chunks of kChunk scores with one block each.
//   - Three histogram passes (digits of 11, 11 and 10 bits, high to low): every block counts its
//     chunk's scores that match the prefix picked so far into a shared histogram, adds it to the
//     KV head's global one, and the block that finishes last (a ticket) picks the bin holding the
//     remaining-th largest — no block waits for another.
//   - A count pass: each chunk's scores above the k-th largest T and equal to it; the last block
//     turns them into each chunk's output offset (ties: the lowest indices first).
//   - A write pass: each chunk writes its picks, ascending, at its offset.
// Exact and deterministic (counts only), checked against top_k_indices in
// tests/cuda/cuda_sparse_select_test.cpp.
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sparse_select.h"

namespace dllm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 16;                 // scores per thread, loaded together
constexpr int kChunk = kThreads * kPerThread;  // scores per block
constexpr int kBins = 2048;                    // 11-bit digits (the last pass uses 1024)
constexpr int kPasses = 3;
// Per KV head in the workspace: kPasses histograms, the passes' tickets (and the count pass's),
// the prefix picked so far and how many of the scores matching it still belong to the top-k,
// then two ints per chunk.
constexpr int kTickets = kPasses * kBins;
constexpr int kPrefix = kTickets + kPasses + 1;
constexpr int kRemaining = kPrefix + 1;
constexpr int kHeader = kRemaining + 2;  // (even)

__host__ __device__ constexpr int digit_shift(int pass) {
  return pass == 0 ? 21 : pass == 1 ? 10 : 0;
}

int chunks_of(int n) {
  return (n + kChunk - 1) / kChunk;
}
size_t ints_per_head(int n) {
  return kHeader + 2 * static_cast<size_t>(chunks_of(n));
}

// Float bits mapped to an unsigned key with the same order (negative scores too: Quest's bound).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The chunk's scores, kPerThread a thread, coalesced (score j = chunk start + u * kThreads +
// thread); keys past n are 0 with valid cleared.
__device__ __forceinline__ void load_chunk_keys(const float* s, int n, uint32_t (&key)[kPerThread],
                                                unsigned& valid) {
  const int base = blockIdx.x * kChunk + static_cast<int>(threadIdx.x);
  valid = 0;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int j = base + u * kThreads;
    key[u] = j < n ? order_key(__ldg(s + j)) : 0u;
    valid |= j < n ? 1u << u : 0u;
  }
}

// Whether this block is the last of the KV head's blocks to pass `ticket` (its global writes
// made visible first); the last block then sees every block's writes.
__device__ bool last_block(int32_t* ticket) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// Pass `kPass`: the histogram of the digit at digit_shift(kPass) over the scores whose higher
// bits match the prefix picked so far; the last block picks the digit of the remaining-th
// largest, scanning the bins from the top (thread t holds bins kBins - 1 - 8t - i, i < 8).
template <int kPass>
__global__ void __launch_bounds__(kThreads)
    top_k_histogram_kernel(const float* scores, int n, int k, int32_t* ws, int per_head) {
  __shared__ int hist[kBins];
  __shared__ int scan_buf[kThreads / 32];
  constexpr int shift = digit_shift(kPass);
  constexpr int above = kPass == 0 ? 32 : digit_shift(kPass - 1);  // the digit's upper end
  const int h = blockIdx.y, lane = threadIdx.x & 31;
  int32_t* w = ws + static_cast<int64_t>(h) * per_head;
  const uint32_t prefix = kPass == 0 ? 0u : static_cast<uint32_t>(w[kPrefix]);
  const int remaining = kPass == 0 ? k : w[kRemaining];
  for (int b = threadIdx.x; b < kBins; b += kThreads) hist[b] = 0;
  __syncthreads();
  uint32_t key[kPerThread];
  unsigned valid;
  load_chunk_keys(scores + static_cast<int64_t>(h) * n, n, key, valid);
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    bool counted = (valid >> u) & 1u;
    if constexpr (kPass > 0) counted = counted && (key[u] >> above) == (prefix >> above);
    const int bin = counted ? static_cast<int>((key[u] >> shift) & (kBins - 1)) : kBins;
    // Warp-aggregated: one softmax's scores share their top bits, so the first pass's adds
    // would all hit a few bins, one by one.
    const unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (bin < kBins && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
  }
  __syncthreads();
  int32_t* global_hist = w + kPass * kBins;
  for (int b = threadIdx.x; b < kBins; b += kThreads)
    if (hist[b] != 0) atomicAdd(&global_hist[b], hist[b]);
  if (!last_block(&w[kTickets + kPass])) return;
  int c[8], total = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    c[i] = __ldcg(&global_hist[kBins - 1 - 8 * static_cast<int>(threadIdx.x) - i]);
    total += c[i];
  }
  int all = 0;
  const int before = block_exclusive_scan(total, scan_buf, &all);
  // The matching scores number at least `remaining` (k < n, then the picked bin's count), so
  // exactly one thread holds the bin.
  if (before < remaining && remaining <= before + total) {
    int a = before, i = 0;
    for (; i < 7 && a + c[i] < remaining; ++i) a += c[i];
    const uint32_t bin = static_cast<uint32_t>(kBins - 1 - 8 * static_cast<int>(threadIdx.x) - i);
    w[kPrefix] = static_cast<int32_t>(prefix | (bin << shift));
    w[kRemaining] = remaining - a;
  }
}

// Each chunk's count of scores above T (the k-th largest's key) and equal to it; the last
// block's warp 0 turns them in place into the picks before the chunk and the equal scores
// before it, 32 chunks at a time.
__global__ void __launch_bounds__(kThreads)
    top_k_count_kernel(const float* scores, int n, int32_t* ws, int per_head) {
  __shared__ int scan_buf[kThreads / 32];
  const int h = blockIdx.y, chunks = static_cast<int>(gridDim.x);
  int32_t* w = ws + static_cast<int64_t>(h) * per_head;
  const uint32_t T = static_cast<uint32_t>(w[kPrefix]);
  const int remaining = w[kRemaining];
  uint32_t key[kPerThread];
  unsigned valid;
  load_chunk_keys(scores + static_cast<int64_t>(h) * n, n, key, valid);
  int larger = 0, equal = 0;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const bool v = (valid >> u) & 1u;
    larger += v && key[u] > T;
    equal += v && key[u] == T;
  }
  int total = 0;  // both counts in one scan: a chunk holds fewer than 2^16 scores
  block_exclusive_scan(larger | (equal << 16), scan_buf, &total);
  int32_t* picks_before = w + kHeader;
  int32_t* equal_before = picks_before + chunks;
  if (threadIdx.x == 0) {
    picks_before[blockIdx.x] = total & 0xffff;
    equal_before[blockIdx.x] = total >> 16;
  }
  if (!last_block(&w[kTickets + kPasses]) || threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  int picks = 0, equals = 0;  // over the chunks before this group of 32
  for (int c0 = 0; c0 < chunks; c0 += 32) {
    const int c = c0 + lane;
    const int L = c < chunks ? __ldcg(&picks_before[c]) : 0;
    const int E = c < chunks ? __ldcg(&equal_before[c]) : 0;
    int e_incl = E;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, e_incl, o);
      if (lane >= o) e_incl += up;
    }
    const int eq_before = equals + e_incl - E;
    const int taken = L + min(max(remaining - eq_before, 0), E);
    int t_incl = taken;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, t_incl, o);
      if (lane >= o) t_incl += up;
    }
    if (c < chunks) {
      picks_before[c] = picks + t_incl - taken;
      equal_before[c] = eq_before;
    }
    picks += __shfl_sync(0xffffffffu, t_incl, 31);
    equals += __shfl_sync(0xffffffffu, e_incl, 31);
  }
}

// Every score above T and the first `remaining` equal ones (lowest indices), as ascending
// indices: each thread takes a run of kPerThread consecutive scores, one block scan of its
// (larger, equal) counts places its run's picks after the chunk's offset.
__global__ void __launch_bounds__(kThreads)
    top_k_write_kernel(const float* scores, int n, int k, const int32_t* ws, int per_head,
                       int32_t* out) {
  __shared__ int scan_buf[kThreads / 32];
  const int h = blockIdx.y, chunks = static_cast<int>(gridDim.x);
  const int32_t* w = ws + static_cast<int64_t>(h) * per_head;
  const uint32_t T = static_cast<uint32_t>(w[kPrefix]);
  const int remaining = w[kRemaining];
  const int chunk_picks = w[kHeader + blockIdx.x], chunk_equal = w[kHeader + chunks + blockIdx.x];
  const float* s = scores + static_cast<int64_t>(h) * n;
  const int first = blockIdx.x * kChunk + static_cast<int>(threadIdx.x) * kPerThread;
  uint32_t key[kPerThread];
  int larger = 0, equal = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int j = first + i;
    key[i] = j < n ? order_key(__ldg(s + j)) : 0u;
    larger += j < n && key[i] > T;
    equal += j < n && key[i] == T;
  }
  int total = 0;
  const int before = block_exclusive_scan(larger | (equal << 16), scan_buf, &total);
  int eq_before = chunk_equal + (before >> 16);
  int pos = chunk_picks + (before & 0xffff) + min(max(remaining - chunk_equal, 0), before >> 16);
  int32_t* o = out + static_cast<int64_t>(h) * k;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int j = first + i;
    if (j >= n) break;
    const bool eq = key[i] == T;
    if (key[i] > T || (eq && eq_before < remaining)) o[pos++] = j;
    eq_before += eq;
  }
}

}  // namespace

size_t top_k_workspace_ints(int n, int kv_heads) {
  return ints_per_head(n) * static_cast<size_t>(kv_heads);
}

void sparse_top_k(const float* scores, int n, int k, int kv_heads, int32_t* out, int32_t* workspace,
                  cudaStream_t stream) {
  if (k <= 0 || k >= n) fail("sparse_top_k: needs 0 < k < n (got k ", k, ", n ", n, ")");
  if (kv_heads <= 0) return;
  if (!workspace) fail("sparse_top_k: needs a workspace of top_k_workspace_ints(n, kv_heads)");
  const int per_head = static_cast<int>(ints_per_head(n));
  DLLM_CUDA_CHECK(
      cudaMemsetAsync(workspace, 0, top_k_workspace_ints(n, kv_heads) * sizeof(int32_t), stream));
  const dim3 grid(chunks_of(n), kv_heads);
  top_k_histogram_kernel<0><<<grid, kThreads, 0, stream>>>(scores, n, k, workspace, per_head);
  DLLM_CUDA_LAUNCH_CHECK();
  top_k_histogram_kernel<1><<<grid, kThreads, 0, stream>>>(scores, n, k, workspace, per_head);
  DLLM_CUDA_LAUNCH_CHECK();
  top_k_histogram_kernel<2><<<grid, kThreads, 0, stream>>>(scores, n, k, workspace, per_head);
  DLLM_CUDA_LAUNCH_CHECK();
  top_k_count_kernel<<<grid, kThreads, 0, stream>>>(scores, n, workspace, per_head);
  DLLM_CUDA_LAUNCH_CHECK();
  top_k_write_kernel<<<grid, kThreads, 0, stream>>>(scores, n, k, workspace, per_head, out);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
