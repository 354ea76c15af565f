// MAGE's score-sum and the per-KV-head top-k (sparse_select.h).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sparse_select.h"

namespace dllm::cuda {
namespace {

constexpr int kScoreWarps = 8;    // keys per score-sum block, one per warp
constexpr int kMaxHeadDim = 256;  // head_dim / 32 values per lane
constexpr int kTopKThreads = 1024;

__device__ __forceinline__ float warp_all_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per prefix key: the key's head_dim values stay in registers while the warp walks
// every (used row, query head) pair of its KV head.
__global__ void score_sum_kernel(ScoreSumParams p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j = blockIdx.x * kScoreWarps + warp, h = blockIdx.y;
  if (j >= p.n_prefix) return;
  const int group = p.heads / p.kv_heads, per_lane = p.head_dim / 32;
  const bf16* k = p.k_cache + static_cast<int64_t>(p.prefix_slots[j]) * p.kv_heads * p.head_dim +
                  h * p.head_dim;
  float kr[kMaxHeadDim / 32];
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i)
    kr[i] = i < per_lane ? __bfloat162float(k[i * 32 + lane]) : 0.0f;
  float acc = 0.0f;
  for (int ri = 0; ri < p.n_rows_used; ++ri) {
    const int r = p.rows_used[ri];
    for (int g = 0; g < group; ++g) {
      const int head = h * group + g;
      const bf16* q = p.q + (static_cast<int64_t>(r) * p.heads + head) * p.head_dim;
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / 32; ++i)
        if (i < per_lane) s += __bfloat162float(q[i * 32 + lane]) * kr[i];
      s = warp_all_sum(s);
      acc += expf(s * p.scale - p.lse[r * p.heads + head]);
    }
  }
  if (lane == 0)
    p.scores[static_cast<int64_t>(h) * p.n_prefix + j] =
        acc / static_cast<float>(p.n_rows_used * group);
}

// Float bits mapped to an unsigned key with the same order (negative scores too: Quest's bound).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Exclusive block scan of `v` (kTopKThreads threads); *total receives the sum.
__device__ int block_exclusive_scan(int v, int* buf, int* total) {
  const int t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (int off = 1; off < kTopKThreads; off <<= 1) {
    const int add = t >= off ? buf[t - off] : 0;
    __syncthreads();
    buf[t] += add;
    __syncthreads();
  }
  const int inclusive = buf[t];
  *total = buf[kTopKThreads - 1];
  __syncthreads();
  return inclusive - v;
}

__global__ void __launch_bounds__(kTopKThreads)
    top_k_kernel(const float* scores, int n, int k, int32_t* out) {
  __shared__ int hist[256];
  __shared__ int scan_buf[kTopKThreads];
  __shared__ uint32_t sh_prefix;
  __shared__ int sh_remaining;
  const float* s = scores + static_cast<int64_t>(blockIdx.x) * n;
  int32_t* o = out + static_cast<int64_t>(blockIdx.x) * k;
  uint32_t prefix = 0, mask = 0;
  int remaining = k;  // how many of the elements matching `prefix` still belong to the top-k
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const uint32_t key = order_key(s[j]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0, b = 255;
      for (; b > 0 && above + hist[b] < remaining; --b) above += hist[b];
      sh_prefix = prefix | (static_cast<uint32_t>(b) << shift);
      sh_remaining = remaining - above;
    }
    __syncthreads();
    prefix = sh_prefix;
    remaining = sh_remaining;
    mask |= 255u << shift;
    __syncthreads();
  }
  // prefix is now the k-th largest key; take every larger element and the first `remaining`
  // equal ones (lowest indices), writing indices in ascending order.
  int taken = 0, equal_seen = 0;
  for (int base = 0; base < n; base += kTopKThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    const uint32_t key = j < n ? order_key(s[j]) : 0u;
    const bool eq = j < n && key == prefix;
    int eq_total = 0;
    const int eq_before = block_exclusive_scan(eq ? 1 : 0, scan_buf, &eq_total);
    const bool take = j < n && (key > prefix || (eq && equal_seen + eq_before < remaining));
    int take_total = 0;
    const int pos = block_exclusive_scan(take ? 1 : 0, scan_buf, &take_total);
    if (take) o[taken + pos] = j;
    taken += take_total;
    equal_seen += eq_total;
  }
}

constexpr int kLseWarps = 4;
constexpr int kLseKeysPerWarp = 128;
constexpr int kLseChunk = kLseWarps * kLseKeysPerWarp;
constexpr int kLseMaxRows = 1536;  // used rows x G per KV head: 4 warps x 1536 x 8 B = 48 KB

// Chunk c of the prefix, KV head h: each warp walks its keys (the key in registers, as the score
// sum) and keeps a running (max, sum) per (used row, query head) in shared memory — entry i owned
// by lane i % 32 — then the warps' states merge into the chunk's partial.
__global__ void prefix_lse_chunk_kernel(ScoreSumParams p, float* partial) {
  extern __shared__ float st[];  // [warps][R][2]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c = blockIdx.x, h = blockIdx.y;
  const int group = p.heads / p.kv_heads, per_lane = p.head_dim / 32;
  const int R = p.n_rows_used * group;
  float* mine = st + warp * R * 2;
  for (int i = lane; i < R; i += 32) {
    mine[2 * i] = -INFINITY;
    mine[2 * i + 1] = 0.0f;
  }
  __syncwarp();
  for (int t = 0; t < kLseKeysPerWarp; ++t) {
    const int j = c * kLseChunk + t * kLseWarps + warp;
    if (j >= p.n_prefix) break;
    const bf16* k = p.k_cache + static_cast<int64_t>(p.prefix_slots[j]) * p.kv_heads * p.head_dim +
                    h * p.head_dim;
    float kr[kMaxHeadDim / 32];
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 32; ++i)
      kr[i] = i < per_lane ? __bfloat162float(k[i * 32 + lane]) : 0.0f;
    for (int i = 0; i < R; ++i) {
      const int r = p.rows_used[i / group], head = h * group + i % group;
      const bf16* q = p.q + (static_cast<int64_t>(r) * p.heads + head) * p.head_dim;
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < kMaxHeadDim / 32; ++d)
        if (d < per_lane) s += __bfloat162float(q[d * 32 + lane]) * kr[d];
      s = warp_all_sum(s) * p.scale;
      if (lane == (i & 31)) {
        const float m = mine[2 * i];
        if (s > m) {
          mine[2 * i + 1] = mine[2 * i + 1] * expf(m - s) + 1.0f;  // exp(-inf) = 0 at the start
          mine[2 * i] = s;
        } else {
          mine[2 * i + 1] += expf(s - m);
        }
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < R; i += blockDim.x) {
    float m = -INFINITY, l = 0.0f;
    for (int w = 0; w < kLseWarps; ++w) {
      const float mw = st[(w * R + i) * 2], lw = st[(w * R + i) * 2 + 1];
      if (mw == -INFINITY) continue;
      const float mn = fmaxf(m, mw);
      l = l * expf(m - mn) + lw * expf(mw - mn);
      m = mn;
    }
    float* out = partial + ((static_cast<int64_t>(c) * p.kv_heads + h) * R + i) * 2;
    out[0] = m;
    out[1] = l;
  }
}

// Merges the chunks' (max, sum) of one (KV head, used row, query head) into its lse.
__global__ void prefix_lse_merge_kernel(ScoreSumParams p, const float* partial, int chunks,
                                        float* lse) {
  const int group = p.heads / p.kv_heads, R = p.n_rows_used * group;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= p.kv_heads * R) return;
  const int h = e / R, i = e % R;
  float m = -INFINITY, l = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    const float* pc = partial + ((static_cast<int64_t>(c) * p.kv_heads + h) * R + i) * 2;
    if (pc[0] == -INFINITY) continue;
    const float mn = fmaxf(m, pc[0]);
    l = l * expf(m - mn) + pc[1] * expf(pc[0] - mn);
    m = mn;
  }
  const int r = p.rows_used[i / group], head = h * group + i % group;
  lse[r * p.heads + head] = m + logf(l);
}

// Block (sequence, KV head): its list of n_keys physical slots for this layer.
__global__ void sparse_gather_keys_kernel(int32_t* staging, const int32_t* table, int kv_heads,
                                          int layer, int page_shift) {
  namespace S = sparse_keys;
  const int32_t* e = table + blockIdx.x * S::kInts;
  if (layer < e[S::kFirstLayer]) return;
  const int h = blockIdx.y, k = e[S::kK], sel_prefix = e[S::kSelPrefix], n = e[S::kNKeys];
  const uint64_t addr = static_cast<uint32_t>(e[S::kSetsLo]) |
                        (static_cast<uint64_t>(static_cast<uint32_t>(e[S::kSetsHi])) << 32);
  const int32_t* sets = reinterpret_cast<const int32_t*>(addr) +
                        (static_cast<int64_t>(layer) * kv_heads + h) * k;
  const int32_t* pages = staging + e[S::kPagesAt];
  int32_t* out = staging + e[S::kKeysAt] + static_cast<int64_t>(h) * n;
  const int mask = (1 << page_shift) - 1;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const int slot = j < k ? sets[j] : sel_prefix + (j - k);
    out[j] = (pages[slot >> page_shift] << page_shift) | (slot & mask);
  }
}

}  // namespace

int prefix_lse_chunk_keys() {
  return kLseChunk;
}

size_t prefix_lse_workspace_floats(int n_prefix, int n_rows_used, int heads, int kv_heads) {
  const size_t chunks = static_cast<size_t>((n_prefix + kLseChunk - 1) / kLseChunk);
  return chunks * static_cast<size_t>(kv_heads) * n_rows_used * (heads / kv_heads) * 2;
}

void mage_prefix_lse(const ScoreSumParams& p, float* lse, float* workspace, cudaStream_t stream) {
  if (p.head_dim % 32 != 0 || p.head_dim > kMaxHeadDim)
    fail("mage_prefix_lse: head_dim must be a multiple of 32, at most 256 (got ", p.head_dim, ")");
  const int R = p.n_rows_used * (p.heads / p.kv_heads);
  if (R > kLseMaxRows)
    fail("mage_prefix_lse: ", p.n_rows_used, " selection rows x ", p.heads / p.kv_heads,
         " query heads per KV head exceed ", kLseMaxRows,
         " (use --sparse-select-queries to select from fewer rows)");
  if (p.n_prefix == 0 || R == 0) return;
  const int chunks = (p.n_prefix + kLseChunk - 1) / kLseChunk;
  const size_t smem = static_cast<size_t>(kLseWarps) * R * 2 * sizeof(float);
  prefix_lse_chunk_kernel<<<dim3(chunks, p.kv_heads), kLseWarps * 32, smem, stream>>>(p,
                                                                                      workspace);
  DLLM_CUDA_LAUNCH_CHECK();
  const int n = p.kv_heads * R;
  prefix_lse_merge_kernel<<<(n + 255) / 256, 256, 0, stream>>>(p, workspace, chunks, lse);
  DLLM_CUDA_LAUNCH_CHECK();
}

void sparse_gather_keys(int32_t* staging, const int32_t* table, int n_seqs, int kv_heads,
                        int layer, int page_shift, cudaStream_t stream) {
  if (n_seqs == 0) return;
  sparse_gather_keys_kernel<<<dim3(n_seqs, kv_heads), 256, 0, stream>>>(staging, table, kv_heads,
                                                                       layer, page_shift);
  DLLM_CUDA_LAUNCH_CHECK();
}

void mage_score_sum(const ScoreSumParams& p, cudaStream_t stream) {
  if (p.head_dim % 32 != 0 || p.head_dim > kMaxHeadDim)
    fail("mage_score_sum: head_dim must be a multiple of 32, at most 256 (got ", p.head_dim, ")");
  if (p.n_prefix == 0 || p.n_rows_used == 0) return;
  const dim3 grid((p.n_prefix + kScoreWarps - 1) / kScoreWarps, p.kv_heads);
  score_sum_kernel<<<grid, kScoreWarps * 32, 0, stream>>>(p);
  DLLM_CUDA_LAUNCH_CHECK();
}

void sparse_top_k(const float* scores, int n, int k, int kv_heads, int32_t* out,
                  cudaStream_t stream) {
  if (k <= 0 || k >= n) fail("sparse_top_k: needs 0 < k < n (got k ", k, ", n ", n, ")");
  top_k_kernel<<<kv_heads, kTopKThreads, 0, stream>>>(scores, n, k, out);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
