// LLaDA2.x MoE FFN kernels (kernels.h): dispatch of the routed assignments by expert, a grouped
// GEMM that runs each expert only over its rows, and the weighted combine. Graph-safe (expert
// offsets stay on the device). The GEMM is tensor-core (mma.sync bf16 -> fp32) and streams each
// touched expert's weights once per 64 of its rows: a decoding step's few rows per expert, and
// the ~32 of 32 concurrent requests, are weight-bandwidth-bound.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/mma_tile.cuh"
#include "backend/cuda/per_device.h"
#include "core/error.h"

namespace dllm::cuda {

namespace {

// The sort's warps: as many as keep their per-expert counters within 40 KB of shared memory.
constexpr int kSortCounterInts = 10240;
int sort_warps(int num_experts) {
  return std::max(1, std::min(32, kSortCounterInts / num_experts));
}

// Calls f(a, e, same) for the warp's assignments a of [begin, end), 32 at a time in order: e the
// held expert's index, expert id - first_expert (-1 past the end, and for an expert outside the
// held first_expert .. + num_experts - 1: such an assignment is left out) and `same` the lanes
// with the same e in this step.
template <class F>
__device__ __forceinline__ void for_warp_assignments(const int32_t* experts, int first_expert,
                                                     int num_experts, int begin, int end, int lane,
                                                     F&& f) {
  for (int a0 = begin; a0 < end; a0 += 32) {
    const int a = a0 + lane;
    int e = a < end ? experts[a] - first_expert : -1;
    if (e < 0 || e >= num_experts) e = -1;
    f(a, e, __match_any_sync(0xffffffffu, e));
    __syncwarp();
  }
}

// A stable counting sort of the assignments by expert in one block. Warp w owns the w-th
// contiguous segment of assignments and counts its experts (per step, the lowest lane of each
// group of equal experts adds the group's size); the warps' counts give every (expert, warp) its
// first sorted position; then each warp places its assignments in order, a lane after the lanes
// below it with the same expert. Deterministic, no atomics: an expert's assignments come out in
// assignment (= token) order.
__global__ void moe_sort_kernel(const int32_t* experts, int assignments, int first_expert,
                                int num_experts, int32_t* offsets, int32_t* order,
                                int32_t* position, int32_t* active) {
  extern __shared__ int32_t sort_smem[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int32_t* start = sort_smem;                            // [experts]: first sorted position
  int32_t* mine = sort_smem + num_experts * (warp + 1);  // [experts]: this warp's counters
  for (int i = threadIdx.x; i < warps * num_experts; i += blockDim.x)
    sort_smem[num_experts + i] = 0;
  __syncthreads();
  const int seg = (assignments + warps - 1) / warps;
  const int begin = min(assignments, warp * seg), end = min(assignments, begin + seg);
  const unsigned below = (1u << lane) - 1;
  for_warp_assignments(experts, first_expert, num_experts, begin, end, lane,
                       [&](int, int e, unsigned same) {
                         if (e >= 0 && (same & below) == 0) mine[e] += __popc(same);
                       });
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {  // warp counts -> warp starts
    int at = 0;
    for (int w = 0; w < warps; ++w) {
      int32_t& c = sort_smem[num_experts * (w + 1) + e];
      const int n = c;
      c = at;
      at += n;
    }
    start[e] = at;  // the expert's count, until the prefix sum below
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int at = 0, used = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int c = start[e];
      start[e] = at;
      offsets[e] = at;
      at += c;
      if (active != nullptr && c > 0) active[1 + used++] = e;
    }
    offsets[num_experts] = at;
    if (active != nullptr) active[0] = used;
  }
  __syncthreads();
  for_warp_assignments(experts, first_expert, num_experts, begin, end, lane,
                       [&](int a, int e, unsigned same) {
                         if (e < 0) {
                           if (a < end)
                             position[a] = -1;  // another rank's expert: moe_combine skips it
                           return;
                         }
                         const int pos = start[e] + mine[e] + __popc(same & below);
                         order[pos] = a;
                         position[a] = pos;
                         __syncwarp(same);  // every lane of the group has read mine[e]
                         if ((same & below) == 0) mine[e] += __popc(same);
                       });
}

// The grouped GEMM's tiles. A block owns (expert e, kTileCols output columns) and runs the
// expert's rows through it kTileRows at a time; warp w owns kWarpCols columns of the tile for all
// of the pass's rows. k goes in chunks of kKChunk through a kStages-deep cp.async pipeline: the
// rows (gathered through `order`) and the weight columns, each as rows of kStride bf16 (padded:
// conflict-free ldmatrix).
constexpr int kTileRows = 64, kTileCols = 64, kGemmWarps = 4, kKChunk = 64, kStages = 4;
constexpr int kGemmThreads = kGemmWarps * 32;
constexpr int kWarpCols = kTileCols / kGemmWarps;
constexpr int kMFrags = kTileRows / 16;  // m16 fragments of a full pass
constexpr int kStride = kKChunk + 8;
constexpr int kVecsPerRow = kKChunk / 8;              // 16-byte copies per row and chunk
constexpr int kRowStep = kGemmThreads / kVecsPerRow;  // rows one sweep of the block copies
constexpr int kStageElems = (kTileRows + kTileCols) * kStride;
static_assert(kTileRows % kRowStep == 0 && kTileCols % kRowStep == 0 && kRowStep % 16 == 0);
static_assert(kWarpCols % 8 == 0 && kKChunk % 32 == 0);  // whole B fragments, x4 loads

// The sweep of one k-chunk's copies into a pipeline stage: rows row0, row0 + kRowStep, ... of the
// pass (only the m16 fragments in use; rows past the pass's end zero-filled) and all kTileCols
// weight columns (past n_out or k: zero-filled).
struct ChunkLoader {
  const bf16* rows[kTileRows / kRowStep];  // this thread's input rows; null past the pass's end
  const bf16* w;                           // the expert's weights [n_out, k]
  const bf16* any;                         // a valid address for zero-filling copies
  int row0, vec, col0, n_out, k, used_rows;

  __device__ void load(int chunk, bf16* stage) const {
    bf16* xs = stage;
    bf16* ws = stage + kTileRows * kStride;
    const int kk = chunk * kKChunk + vec * 8;
    const bool k_in = kk < k;  // k % 8 == 0: a 16-byte vector is wholly in or out
#pragma unroll
    for (int i = 0; i < kTileRows / kRowStep; ++i) {
      const int r = row0 + i * kRowStep;
      if (r >= used_rows) break;
      const bool valid = k_in && rows[i] != nullptr;
      ptx::cp_async16(xs + r * kStride + vec * 8, valid ? rows[i] + kk : any, valid);
    }
#pragma unroll
    for (int i = 0; i < kTileCols / kRowStep; ++i) {
      const int c = row0 + i * kRowStep, col = col0 + c;
      const bool valid = k_in && col < n_out;
      ptx::cp_async16_l2_256(ws + c * kStride + vec * 8,
                             valid ? w + static_cast<int64_t>(col) * k + kk : any, valid);
    }
  }
};

// acc[mf] += the pass's rows mf*16.. (the first `frags` fragments) · the warp's columns over one
// k-chunk of a stage, 16 k at a time in order (mma.sync m16n8k16, fp32 accumulators). The warp's
// B fragments load once per chunk and serve every row fragment: the shared-memory reads per
// weight byte stay low enough that 2-4 row fragments remain bound by the weights' DRAM stream.
__device__ __forceinline__ void chunk_mma(const bf16* stage, int frags, int warp, int lane,
                                          float (&acc)[kMFrags][kWarpCols / 8][4]) {
  using namespace ptx;
  const bf16* xs = stage;
  const bf16* ws = stage + kTileRows * kStride + warp * kWarpCols * kStride;
  uint32_t b[kWarpCols / 8][kKChunk / 32][4];  // b0, b1 of k 32kp.. and of 32kp + 16..
#pragma unroll
  for (int nt = 0; nt < kWarpCols / 8; ++nt)
#pragma unroll
    for (int kp = 0; kp < kKChunk / 32; ++kp)
      ldmatrix_x4(b[nt][kp], b_fragment_row<kStride>(ws, nt, lane) + kp * 32);
#pragma unroll
  for (int mf = 0; mf < kMFrags; ++mf) {
    if (mf >= frags) break;
    uint32_t a[kKChunk / 16][4];
#pragma unroll
    for (int kk = 0; kk < kKChunk / 16; ++kk)
      ldmatrix_x4(a[kk], a_fragment_row(xs + mf * 16 * kStride + kk * 16, kStride, lane));
#pragma unroll
    for (int nt = 0; nt < kWarpCols / 8; ++nt)
#pragma unroll
      for (int kp = 0; kp < kKChunk / 32; ++kp) {
        mma_bf16(acc[mf][nt], a[2 * kp], b[nt][kp][0], b[nt][kp][1]);
        mma_bf16(acc[mf][nt], a[2 * kp + 1], b[nt][kp][2], b[nt][kp][3]);
      }
  }
}

// Tensor-core grouped GEMM. Graph-safe: the grid is fixed on the host — every expert, or with
// moe_sort's `active` list as many experts as there can be with rows — and blocks past the
// experts with rows exit at once. Batch invariant: every output element is the same chain of mma
// over k = 0, 16, 32, ... from a zero fp32 accumulator whatever the other rows of its tile are, and
// the pass's row count only decides how many m16 fragments run, never the arithmetic of one.
// 3 blocks a multiprocessor (their shared memory fits; registers capped to match).
__global__ void __launch_bounds__(kGemmThreads, 3) moe_gemm_kernel(MoeGemmParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);
  int e = blockIdx.x;
  if (p.active != nullptr) {
    if (e >= p.active[0]) return;
    e = p.active[1 + e];
  }
  const int begin = p.offsets[e], end = p.offsets[e + 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = (p.k + kKChunk - 1) / kKChunk;
  ChunkLoader ld;
  ld.w = p.w + static_cast<int64_t>(e) * p.n_out * p.k;
  ld.any = p.w;
  ld.row0 = threadIdx.x / kVecsPerRow;
  ld.vec = threadIdx.x % kVecsPerRow;
  ld.col0 = blockIdx.y * kTileCols;
  ld.n_out = p.n_out;
  ld.k = p.k;
  for (int a0 = begin; a0 < end; a0 += kTileRows) {
    const int rows = min(kTileRows, end - a0);
    const int frags = (rows + 15) / 16;
    ld.used_rows = frags * 16;
#pragma unroll
    for (int i = 0; i < kTileRows / kRowStep; ++i) {
      const int r = ld.row0 + i * kRowStep;
      const int64_t row = r >= rows ? -1 : p.order ? p.order[a0 + r] / p.top_k : a0 + r;
      ld.rows[i] = row < 0 ? nullptr : p.in + row * p.k;
    }
    float acc[kMFrags][kWarpCols / 8][4] = {};
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < chunks) ld.load(s, smem + s * kStageElems);
      ptx::cp_async_commit();
    }
    for (int c = 0; c < chunks; ++c) {
      ptx::cp_async_wait<kStages - 2>();  // chunk c has landed
      __syncthreads();                    // ... for every thread, and chunk c - 1 is consumed
      const int next = c + kStages - 1;
      if (next < chunks) ld.load(next, smem + (next % kStages) * kStageElems);
      ptx::cp_async_commit();
      chunk_mma(smem + (c % kStages) * kStageElems, frags, warp, lane, acc);
    }
    __syncthreads();  // the next pass's first copies reuse the stages

    // Lane l holds rows l / 4 (+ 8) and columns 2 (l % 4) (+ 1) of each fragment.
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int nt = 0; nt < kWarpCols / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = mf * 16 + lane / 4 + (i >= 2 ? 8 : 0);
          const int col = ld.col0 + warp * kWarpCols + nt * 8 + 2 * (lane % 4) + (i & 1);
          if (r >= rows || col >= p.n_out) continue;
          const int64_t at = static_cast<int64_t>(a0 + r) * p.n_out + col;
          if (p.out_f32) {
            static_cast<float*>(p.out)[at] = acc[mf][nt][i];
          } else {
            static_cast<bf16*>(p.out)[at] = __float2bfloat16(acc[mf][nt][i]);
          }
        }
  }
}

__global__ void moe_combine_kernel(const float* y, const int32_t* position, const float* weights,
                                   int top_k, int hidden, float* out, bool accumulate) {
  const int t = blockIdx.x;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float sum = accumulate ? out[static_cast<int64_t>(t) * hidden + d] : 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int a = t * top_k + j;
      if (position[a] < 0) continue;  // an expert this rank does not hold
      sum += weights[a] * y[static_cast<int64_t>(position[a]) * hidden + d];
    }
    out[static_cast<int64_t>(t) * hidden + d] = sum;
  }
}

}  // namespace

void moe_sort(const int32_t* experts, int n, int top_k, int first_expert, int num_experts,
              int32_t* offsets, int32_t* order, int32_t* position, int32_t* active,
              cudaStream_t stream) {
  if (num_experts < 1 || num_experts > 1024)
    fail("moe_sort: ", num_experts, " experts (the CUDA dispatch handles 1..1024)");
  const int warps = sort_warps(num_experts);
  const size_t smem = size_t(warps + 1) * num_experts * sizeof(int32_t);
  moe_sort_kernel<<<1, warps * 32, smem, stream>>>(experts, n * top_k, first_expert, num_experts,
                                                   offsets, order, position, active);
  DLLM_CUDA_LAUNCH_CHECK();
}

void moe_grouped_gemm(const MoeGemmParams& p, cudaStream_t stream) {
  if (p.experts < 1 || p.n_out < 1 || p.k < 1)
    fail("moe_grouped_gemm: empty shape (experts ", p.experts, ", n_out ", p.n_out, ", k ", p.k,
         "; each must be >= 1)");
  if (p.k % 8 != 0) fail("moe_grouped_gemm: k = ", p.k, " must be a multiple of 8 (16-byte rows)");
  if (reinterpret_cast<uintptr_t>(p.in) % 16 != 0 || reinterpret_cast<uintptr_t>(p.w) % 16 != 0)
    fail("moe_grouped_gemm: in and w must be 16-byte aligned (cp.async rows)");
  const unsigned col_tiles = static_cast<unsigned>((p.n_out + kTileCols - 1) / kTileCols);
  if (col_tiles > 65535u)
    fail("moe_grouped_gemm: n_out = ", p.n_out, " exceeds ", 65535 * kTileCols);
  constexpr size_t smem = size_t{kStages} * kStageElems * sizeof(bf16);
  static_assert(smem > 48 * 1024);  // above the default limit: opt in, once
  static PerDevice<bool> configured;
  configured.get([] {
    DLLM_CUDA_CHECK(cudaFuncSetAttribute(
        moe_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  });
  if (p.active != nullptr && p.assignments < 1) {
    if (p.assignments == 0) return;  // no rows
    fail("moe_grouped_gemm: assignments = ", p.assignments, " (must be >= 0)");
  }
  const int blocks = p.active != nullptr ? std::min(p.experts, p.assignments) : p.experts;
  const dim3 grid(static_cast<unsigned>(blocks), col_tiles);
  moe_gemm_kernel<<<grid, kGemmThreads, smem, stream>>>(p);
  DLLM_CUDA_LAUNCH_CHECK();
}

void moe_combine(const float* y, const int32_t* position, const float* weights, int n, int top_k,
                 int hidden, float* out, bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  moe_combine_kernel<<<n, 256, 0, stream>>>(y, position, weights, top_k, hidden, out, accumulate);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
