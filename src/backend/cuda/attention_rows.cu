// Head-averaged attention probability rows (d2Cache's attention rollout, method-specs §4.5):
// out[i, slot(j)] = (1 / heads) sum_h softmax_j(q_ih . k_j * scale) for every query row i and key
// j of a bidirectional forward.
//
// Two passes, no atomics (the rows feed a nucleus selection, so they must be deterministic):
//  1. One block per (tile of query rows, KV head, chunk of that KV head's query heads). The block
//     holds up to S "score rows" (query row x query head of the group) with their q in registers.
//     Each warp takes one key at a time: one coalesced read of the key, S partial dot products per
//     lane, and one transposing butterfly reduction that sums all S across the warp in 2S - 1
//     shuffles (not 5 S). The scores live in shared memory; a softmax per score row follows, and
//     the block writes the sum over its heads of the probabilities to a workspace row.
//  2. A combine pass sums the workspace rows of every (KV head, chunk) in a fixed order, scales by
//     1 / heads and scatters the sum to the key's slot column.
// A K/V-head group's keys are read once per tile of query rows (LLaDA-8B: 16 rows of one head;
// Dream-7B: 2 rows x 7 heads), from L2 for d2Cache's canvases.
#include <algorithm>
#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/per_device.h"

namespace dllm::cuda {

namespace {

// 16 warps: a block is often alone on its SM (d2Cache's 64 rows make ~128 blocks), and the key
// loop is bound by load latency, so every warp in flight counts.
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxScoreRows = 16;

// Scores of score row s live at scores[s * ld + j]; ld is odd so that the lanes writing different
// score rows of one key hit different banks.
__host__ __device__ inline int score_ld(int n_keys) { return (n_keys + 31) / 32 * 32 + 1; }

// Transposing butterfly reduction of N values per lane over the 32 lanes. At each halving stage a
// lane keeps one half of its values (the upper half when its lane bit is set), sends the other half
// to its partner and adds what it receives. Afterwards lane l holds the warp sum of value
// l / (32 / N) in v[0].
template <int N, int Off>
__device__ __forceinline__ void transpose_reduce(float (&v)[kMaxScoreRows], int lane) {
  if constexpr (Off > 0) {
    if constexpr (N > 1) {
      constexpr int H = N / 2;
      const bool upper = (lane & Off) != 0;
#pragma unroll
      for (int k = 0; k < H; ++k) {
        const float send = upper ? v[k] : v[k + H];
        const float keep = upper ? v[k + H] : v[k];
        v[k] = keep + __shfl_xor_sync(0xffffffffu, send, Off);
      }
      transpose_reduce<H, Off / 2>(v, lane);
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], Off);
      transpose_reduce<1, Off / 2>(v, lane);
    }
  }
}

struct RowsLayout {
  int group;      // query heads per KV head
  int gh;         // query heads per chunk (<= S)
  int chunks;     // chunks per KV head
  int rows;       // query rows per block tile (S / gh, at least 1)
  int row_tiles;  // ceil(n_q / rows)
};

// S = score rows per block; E = ceil(head_dim / 64): lane l holds dims 64 e + 2 l, 64 e + 2 l + 1
// (those below head_dim).
template <int S, int E>
__global__ void __launch_bounds__(kThreads)
    attention_rows_partial_kernel(AttentionRowsParams p, RowsLayout lay, float* ws) {
  extern __shared__ float scores[];  // [S, ld]
  __shared__ float inv_sum[S];
  const int tile = blockIdx.x, y = blockIdx.y;
  const int g = y / lay.chunks, chunk = y % lay.chunks;
  const int h0 = g * lay.group + chunk * lay.gh;
  const int heads_here = min(lay.gh, lay.group - chunk * lay.gh);
  const int i0 = tile * lay.rows;
  const int rows_here = min(lay.rows, p.n_q - i0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_dim = p.kv_heads * p.head_dim;
  const int ld = score_ld(p.n_keys);

  // q of every score row (s = row * gh + head), pre-scaled; zeros for unused score rows.
  float q[S][E][2];
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const int r = s / lay.gh, hh = s % lay.gh;
    const bool valid = r < rows_here && hh < heads_here;
    const bf16* qp =
        p.q + (static_cast<size_t>(i0 + (valid ? r : 0)) * p.heads + h0 + (valid ? hh : 0)) *
                  p.head_dim;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = 64 * e + 2 * lane;
      const bool in = valid && d < p.head_dim;
      const __nv_bfloat162 v2 =
          in ? *reinterpret_cast<const __nv_bfloat162*>(qp + d) : __floats2bfloat162_rn(0, 0);
      q[s][e][0] = __low2float(v2) * p.scale;
      q[s][e][1] = __high2float(v2) * p.scale;
    }
  }

  // Keys in groups of kPrefetch per warp: all their loads are issued before any is used, so a
  // warp has several L2 round trips in flight instead of one.
  constexpr int kPrefetch = 4;
  for (int j0 = warp * kPrefetch; j0 < p.n_keys; j0 += kWarps * kPrefetch) {
    float k[kPrefetch][E][2];
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u) {
      const int j = j0 + u;
      const int slot = j < p.n_keys ? (p.key_slots ? p.key_slots[j] : j) : -1;
      const bf16* kp = p.k_cache + static_cast<size_t>(max(slot, 0)) * kv_dim + g * p.head_dim;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = 64 * e + 2 * lane;
        const __nv_bfloat162 v2 = slot >= 0 && d < p.head_dim
                                      ? *reinterpret_cast<const __nv_bfloat162*>(kp + d)
                                      : __floats2bfloat162_rn(0, 0);
        k[u][e][0] = __low2float(v2);
        k[u][e][1] = __high2float(v2);
      }
    }
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u) {
      const int j = j0 + u;
      if (j >= p.n_keys) break;  // warp-uniform
      float v[kMaxScoreRows];
#pragma unroll
      for (int s = 0; s < S; ++s) {
        float acc = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e)
          acc = fmaf(q[s][e][0], k[u][e][0], fmaf(q[s][e][1], k[u][e][1], acc));
        v[s] = acc;
      }
      transpose_reduce<S, 16>(v, lane);
      constexpr int kLanesPerRow = 32 / S;
      if (lane % kLanesPerRow == 0) scores[(lane / kLanesPerRow) * ld + j] = v[0];
    }
  }
  __syncthreads();

  // Softmax numerators in place, one warp per score row.
  for (int s = warp; s < S; s += kWarps) {
    if (s / lay.gh >= rows_here || s % lay.gh >= heads_here) continue;
    float* row = scores + s * ld;
    float mx = -FLT_MAX;
    for (int j = lane; j < p.n_keys; j += 32) mx = fmaxf(mx, row[j]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    for (int j = lane; j < p.n_keys; j += 32) {
      const float e = __expf(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) inv_sum[s] = 1.0f / sum;
  }
  __syncthreads();

  // Sum over this block's heads, per query row, into the workspace row (y, i).
  for (int r = 0; r < rows_here; ++r) {
    float* dst = ws + (static_cast<size_t>(y) * p.n_q + i0 + r) * p.n_keys;
    for (int j = threadIdx.x; j < p.n_keys; j += kThreads) {
      float acc = 0.0f;
      for (int hh = 0; hh < heads_here; ++hh) {
        const int s = r * lay.gh + hh;
        acc += scores[s * ld + j] * inv_sum[s];
      }
      dst[j] = acc;
    }
  }
}

__global__ void attention_rows_combine_kernel(AttentionRowsParams p, int parts, const float* ws) {
  const size_t total = static_cast<size_t>(p.n_q) * p.n_keys;
  const float inv_heads = 1.0f / static_cast<float>(p.heads);
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx / p.n_keys), j = static_cast<int>(idx % p.n_keys);
    float acc = 0.0f;
    for (int y = 0; y < parts; ++y) acc += ws[static_cast<size_t>(y) * total + idx];
    const int col = p.column_slots ? p.column_slots[j] : p.key_slots ? p.key_slots[j] : j;
    p.out[static_cast<size_t>(i) * p.width + col] = acc * inv_heads;
  }
}

int max_dynamic_smem() {
  static PerDevice<int> bytes_on;
  return bytes_on.get([] {
    int dev = 0, v = 0;
    DLLM_CUDA_CHECK(cudaGetDevice(&dev));
    DLLM_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return v - static_cast<int>(kMaxScoreRows * sizeof(float)) - 1024;  // static smem, margin
  });
}

size_t scores_bytes(int score_rows, int n_keys) {
  return static_cast<size_t>(score_rows) * score_ld(n_keys) * sizeof(float);
}

// The most score rows per block (a power of two <= 16) whose scores fit in shared memory.
int score_rows_for(int n_keys) {
  int s = kMaxScoreRows;
  while (s > 1 && scores_bytes(s, n_keys) > static_cast<size_t>(max_dynamic_smem())) s /= 2;
  return s;
}

RowsLayout layout_for(int score_rows, int n_q, int heads, int kv_heads) {
  RowsLayout lay;
  lay.group = heads / kv_heads;
  lay.chunks = (lay.group + score_rows - 1) / score_rows;
  lay.gh = (lay.group + lay.chunks - 1) / lay.chunks;
  lay.rows = std::max(1, score_rows / lay.gh);
  lay.row_tiles = (n_q + lay.rows - 1) / lay.rows;
  return lay;
}

template <int S, int E>
void launch_partial(const AttentionRowsParams& p, const RowsLayout& lay, cudaStream_t stream) {
  const size_t smem = scores_bytes(S, p.n_keys);
  auto kernel = attention_rows_partial_kernel<S, E>;
  DLLM_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(lay.row_tiles, p.kv_heads * lay.chunks);
  kernel<<<grid, kThreads, smem, stream>>>(p, lay, p.workspace);
}

template <int E>
void launch_partial_e(int score_rows, const AttentionRowsParams& p, const RowsLayout& lay,
                      cudaStream_t stream) {
  switch (score_rows) {
    case 16: return launch_partial<16, E>(p, lay, stream);
    case 8: return launch_partial<8, E>(p, lay, stream);
    case 4: return launch_partial<4, E>(p, lay, stream);
    case 2: return launch_partial<2, E>(p, lay, stream);
    default: return launch_partial<1, E>(p, lay, stream);
  }
}

// The reverse-vector rollout of d2cache::rollout_importance (the host reference), one block: the
// layers are sequential and each is a small (n x width) pass that L2 serves. fp32 here, double on
// the host.
__global__ void __launch_bounds__(1024) attention_rollout_kernel(const float* rows,
                                                                  const int32_t* query_slots,
                                                                  int layers, int n, int width,
                                                                  float* ws) {
  float* v = ws;               // [width] importance so far (the result ends here)
  float* next = ws + width;    // [width]
  float* w = ws + 2 * width;   // [n] weight of each query row in this layer
  float* is_query = w + n;     // [width] 1 at a query's own column
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int j = threadIdx.x; j < width; j += blockDim.x) {
    v[j] = 1.0f;
    is_query[j] = 0.0f;
  }
  __syncthreads();
  for (int r = threadIdx.x; r < n; r += blockDim.x) is_query[query_slots[r]] = 1.0f;
  __syncthreads();
  for (int l = layers - 1; l >= 0; --l) {
    const float* a = rows + static_cast<size_t>(l) * n * width;
    // w_r = v[slot_r] / (1 + sum_j a[r][j]): row r of (A + E) normalised, weighted by v.
    for (int r = warp; r < n; r += warps) {
      float sum = 0.0f;
      for (int j = lane; j < width; j += 32) sum += a[static_cast<size_t>(r) * width + j];
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) w[r] = v[query_slots[r]] / (1.0f + sum);
    }
    __syncthreads();
    // Columns that are not query rows carry their weight through unchanged (unit rows).
    for (int j = threadIdx.x; j < width; j += blockDim.x) {
      float acc = is_query[j] != 0.0f ? 0.0f : v[j];
      for (int r = 0; r < n; ++r) acc = fmaf(w[r], a[static_cast<size_t>(r) * width + j], acc);
      next[j] = acc;
    }
    __syncthreads();
    for (int r = threadIdx.x; r < n; r += blockDim.x) next[query_slots[r]] += w[r];  // + e_i
    __syncthreads();
    for (int j = threadIdx.x; j < width; j += blockDim.x) v[j] = next[j];
    __syncthreads();
  }
}

}  // namespace

size_t attention_rollout_workspace_floats(int n, int width) {
  return static_cast<size_t>(3) * width + n;
}

void attention_rollout(const float* rows, const int32_t* query_slots, int layers, int n,
                       int width, float* workspace, cudaStream_t stream) {
  if (n <= 0 || width <= 0) return;
  attention_rollout_kernel<<<1, 1024, 0, stream>>>(rows, query_slots, layers, n, width, workspace);
  DLLM_CUDA_CHECK(cudaGetLastError());
}

size_t attention_rows_max_keys() {
  // One score row per block; the workspace and output are the caller's.
  return static_cast<size_t>(max_dynamic_smem()) / sizeof(float) - 64;
}

size_t attention_rows_workspace_floats(int n_q, int n_keys, int heads, int kv_heads) {
  if (n_q <= 0 || n_keys <= 0) return 0;
  const RowsLayout lay = layout_for(score_rows_for(n_keys), n_q, heads, kv_heads);
  return static_cast<size_t>(kv_heads) * lay.chunks * n_q * n_keys;
}

void attention_rows(const AttentionRowsParams& p, cudaStream_t stream) {
  if (p.n_q <= 0 || p.n_keys <= 0) return;
  if (p.head_dim % 2 != 0 || p.head_dim > 256)
    fail("attention rows: head_dim ", p.head_dim, " must be even and at most 256");
  if (static_cast<size_t>(p.n_keys) > attention_rows_max_keys())
    fail("attention rows: ", p.n_keys, " keys exceed the kernel's ", attention_rows_max_keys());
  const int score_rows = score_rows_for(p.n_keys);
  const RowsLayout lay = layout_for(score_rows, p.n_q, p.heads, p.kv_heads);
  switch ((p.head_dim + 63) / 64) {
    case 1: launch_partial_e<1>(score_rows, p, lay, stream); break;
    case 2: launch_partial_e<2>(score_rows, p, lay, stream); break;
    case 3: launch_partial_e<3>(score_rows, p, lay, stream); break;
    default: launch_partial_e<4>(score_rows, p, lay, stream); break;
  }
  DLLM_CUDA_CHECK(cudaGetLastError());
  const size_t total = static_cast<size_t>(p.n_q) * p.n_keys;
  const int blocks = static_cast<int>(std::min<size_t>((total + 255) / 256, 4096));
  attention_rows_combine_kernel<<<blocks, 256, 0, stream>>>(p, p.kv_heads * lay.chunks,
                                                            p.workspace);
  DLLM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dllm::cuda
