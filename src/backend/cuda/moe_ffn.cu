// LLaDA2.x MoE FFN kernels (kernels.h): dispatch of the routed assignments by expert, a grouped
// GEMM that runs each expert only over its rows, and the weighted combine. Graph-safe (expert
// offsets and the GEMM's work list stay on the device). The GEMM is tensor-core (mma.sync bf16 ->
// fp32) and streams each touched expert's weights once per tile of 128 of its rows: a decoding
// step's few rows per expert are weight-bandwidth-bound, many concurrent requests' rows
// compute-bound.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/mma_tile.cuh"
#include "backend/cuda/moe_gemm_sm90.h"
#include "backend/cuda/moe_gemm_tile.cuh"
#include "backend/cuda/pdl_launch.h"
#include "backend/cuda/per_device.h"
#include "core/error.h"

namespace dllm::cuda {

namespace {

// The sort's warps: as many as keep their per-expert counters within 36 KB of shared memory (with
// the experts' first positions and first tiles, within the 48 KB a launch may use by default).
constexpr int kSortCounterInts = 9216;
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

// The stable counting sort of the assignments by expert, in one block or, for many assignments,
// over several (moe_sort_scratch_ints). A block's segment of assignments is split among its warps:
// warp w counts the experts of its part (per step, the lowest lane of each group of equal experts
// adds the group's size); the warps' counts give every (expert, warp) its first position in the
// block's share of the expert's sorted positions; then each warp places its assignments in order,
// a lane after the lanes below it with the same expert. Deterministic, no atomics: an expert's
// assignments come out in assignment (= token) order, however many blocks sort them.
struct SortSegment {
  int begin, end;  // this warp's assignments
  int32_t* mine;   // [experts]: its counters (shared memory)
};

// Counts the warp's part of [seg_begin, seg_end) into counters [warps][experts] (zeroed here);
// after it, counters hold each (warp, expert)'s first position in the block's share and
// total[e] (may alias nothing else) the block's count of expert e.
__device__ SortSegment count_segment(const int32_t* experts, int first_expert, int num_experts,
                                     int seg_begin, int seg_end, int32_t* counters,
                                     int32_t* total) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < warps * num_experts; i += blockDim.x) counters[i] = 0;
  __syncthreads();
  const int part = (seg_end - seg_begin + warps - 1) / warps;
  SortSegment s;
  s.begin = min(seg_end, seg_begin + warp * part);
  s.end = min(seg_end, s.begin + part);
  s.mine = counters + num_experts * warp;
  const unsigned below = (1u << lane) - 1;
  for_warp_assignments(experts, first_expert, num_experts, s.begin, s.end, lane,
                       [&](int, int e, unsigned same) {
                         if (e >= 0 && (same & below) == 0) s.mine[e] += __popc(same);
                       });
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {  // warp counts -> warp starts
    int at = 0;
    for (int w = 0; w < warps; ++w) {
      int32_t& c = counters[num_experts * w + e];
      const int n = c;
      c = at;
      at += n;
    }
    total[e] = at;
  }
  __syncthreads();
  return s;
}

// Places the warp's assignments: expert e's next at base[e] + its warp's counter.
__device__ void place_segment(const int32_t* experts, int first_expert, int num_experts,
                              const SortSegment& s, const int32_t* base, int32_t* order,
                              int32_t* position) {
  const int lane = threadIdx.x % 32;
  const unsigned below = (1u << lane) - 1;
  for_warp_assignments(experts, first_expert, num_experts, s.begin, s.end, lane,
                       [&](int a, int e, unsigned same) {
                         if (e < 0) {
                           if (a < s.end)
                             position[a] = -1;  // another rank's expert: moe_combine skips it
                           return;
                         }
                         const int pos = base[e] + s.mine[e] + __popc(same & below);
                         order[pos] = a;
                         position[a] = pos;
                         __syncwarp(same);  // every lane of the group has read mine[e]
                         if ((same & below) == 0) s.mine[e] += __popc(same);
                       });
}

// An expert's share of the prefix sums: its sorted rows, its tiles of them, whether it has rows.
struct ExpertSums {  // (no initialisers: it is also a __shared__ array's type)
  int rows, tiles, used;
};
__device__ __forceinline__ ExpertSums operator+(const ExpertSums& a, const ExpertSums& b) {
  return {a.rows + b.rows, a.tiles + b.tiles, a.used + b.used};
}
__device__ __forceinline__ ExpertSums operator-(const ExpertSums& a, const ExpertSums& b) {
  return {a.rows - b.rows, a.tiles - b.tiles, a.used - b.used};
}
__device__ __forceinline__ ExpertSums warp_shfl_up(const ExpertSums& v, int by) {
  return {__shfl_up_sync(0xffffffffu, v.rows, by), __shfl_up_sync(0xffffffffu, v.tiles, by),
          __shfl_up_sync(0xffffffffu, v.used, by)};
}

__device__ __forceinline__ ExpertSums expert_sums(int count) {
  return {count, (count + kMoeTileRows - 1) / kMoeTileRows, count > 0 ? 1 : 0};
}

// From every expert's count in start[e] (shared memory): start[e] becomes its first position, and
// offsets the same — the routed positions after the extra expert's `extra_rows` — and the grouped
// GEMM's work list: the extra expert's tiles first, then each expert's in order. Each thread takes
// a run of experts and the block scans the runs' sums: one thread walking all 256 experts was a ~10
// µs dependent chain of a decoding step's sort (LLaDA2-mini, H200).
__device__ void list_experts(int32_t* start, int32_t* first_tile, int num_experts, int extra_rows,
                             int top_k, int32_t* offsets, int32_t* order, int32_t* work) {
  const int extra_tiles = (extra_rows + kMoeTileRows - 1) / kMoeTileRows;
  for (int t = threadIdx.x; t < extra_rows; t += blockDim.x) order[t] = t * top_k;
  if (work != nullptr)
    for (int t = threadIdx.x; t < extra_tiles; t += blockDim.x) work[2 + t] = num_experts | t << 10;
  const int per = (num_experts + blockDim.x - 1) / blockDim.x;
  const int e0 = min(num_experts, static_cast<int>(threadIdx.x) * per);
  const int e1 = min(num_experts, e0 + per);
  __shared__ ExpertSums warp_totals[32];
  ExpertSums run{}, total;
  for (int e = e0; e < e1; ++e) run = run + expert_sums(start[e]);
  ExpertSums at = block_exclusive_scan(run, warp_totals, &total);
  for (int e = e0; e < e1; ++e) {  // (each thread reads and rewrites its own run only)
    const ExpertSums mine = expert_sums(start[e]);
    start[e] = extra_rows + at.rows;
    offsets[e] = extra_rows + at.rows;
    first_tile[e] = extra_tiles + at.tiles;
    at = at + mine;
  }
  if (threadIdx.x == 0) {
    offsets[num_experts] = extra_rows + total.rows;
    first_tile[num_experts] = extra_tiles + total.tiles;
    if (work != nullptr) {
      work[0] = extra_tiles + total.tiles;
      work[1] = total.used;
    }
  }
  __syncthreads();
  if (work != nullptr)
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x)
      for (int t = first_tile[e]; t < first_tile[e + 1]; ++t)
        work[2 + t] = e | (t - first_tile[e]) << 10;
}

// The whole sort in one block (shared memory: first_tile [experts + 1], start [experts],
// counters [warps][experts]).
__global__ void moe_sort_kernel(const int32_t* experts, int assignments, int top_k, int extra_rows,
                                int first_expert, int num_experts, int32_t* offsets, int32_t* order,
                                int32_t* position, int32_t* work) {
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  extern __shared__ int32_t sort_smem[];
  int32_t* first_tile = sort_smem;
  int32_t* start = sort_smem + num_experts + 1;
  int32_t* counters = start + num_experts;
  const SortSegment s =
      count_segment(experts, first_expert, num_experts, 0, assignments, counters, start);
  list_experts(start, first_tile, num_experts, extra_rows, top_k, offsets, order, work);
  __syncthreads();
  place_segment(experts, first_expert, num_experts, s, start, order, position);
}

// Several blocks, each over kMoeSortBlockAssignments: their counts per expert (block_base
// [blocks][experts], global) ...
constexpr int kSortBlockAssignments = kMoeSortBlockAssignments;

__global__ void moe_sort_count_kernel(const int32_t* experts, int assignments, int first_expert,
                                      int num_experts, int32_t* block_base) {
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  extern __shared__ int32_t sort_smem[];
  int32_t* total = sort_smem;                   // [experts]
  int32_t* counters = sort_smem + num_experts;  // [warps][experts]
  const int begin = blockIdx.x * kSortBlockAssignments;
  count_segment(experts, first_expert, num_experts, begin,
                min(assignments, begin + kSortBlockAssignments), counters, total);
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x)
    block_base[static_cast<int64_t>(blockIdx.x) * num_experts + e] = total[e];
}

// ... then, in one block, every expert's total, the offsets and the work list, and each block's
// first position of each expert (block_base, in place) ...
__global__ void moe_sort_scan_kernel(int blocks, int top_k, int extra_rows, int num_experts,
                                     int32_t* block_base, int32_t* offsets, int32_t* order,
                                     int32_t* work) {
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  extern __shared__ int32_t sort_smem[];
  int32_t* first_tile = sort_smem;               // [experts + 1]
  int32_t* start = sort_smem + num_experts + 1;  // [experts]: counts, then first positions
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int at = 0;
    for (int b = 0; b < blocks; ++b) {
      int32_t& c = block_base[static_cast<int64_t>(b) * num_experts + e];
      const int n = c;
      c = at;
      at += n;
    }
    start[e] = at;
  }
  __syncthreads();
  list_experts(start, first_tile, num_experts, extra_rows, top_k, offsets, order, work);
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x)
    for (int b = 0; b < blocks; ++b)
      block_base[static_cast<int64_t>(b) * num_experts + e] += start[e];
}

// ... and each block places its assignments from its bases.
__global__ void moe_sort_place_kernel(const int32_t* experts, int assignments, int first_expert,
                                      int num_experts, const int32_t* block_base, int32_t* order,
                                      int32_t* position) {
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  extern __shared__ int32_t sort_smem[];
  int32_t* base = sort_smem;                    // [experts]
  int32_t* counters = sort_smem + num_experts;  // [warps][experts]
  const int begin = blockIdx.x * kSortBlockAssignments;
  const SortSegment s =
      count_segment(experts, first_expert, num_experts, begin,
                    min(assignments, begin + kSortBlockAssignments), counters, base);
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x)
    base[e] = block_base[static_cast<int64_t>(blockIdx.x) * num_experts + e];
  __syncthreads();
  place_segment(experts, first_expert, num_experts, s, base, order, position);
}

// The grouped GEMM's tiles. A block owns one work item — an expert e and a tile of up to
// kTileRows of its rows — and kTileCols output columns; its 8 warps split the tile into 2 x 4
// warp tiles of 64 rows x kWarpCols columns. k goes in chunks of kKChunk through a kStages-deep
// cp.async pipeline: the rows (gathered through `order`) and the weight rows of the tile's
// columns, each as rows of kStride bf16 (padded: conflict-free ldmatrix). The tile's size is set
// by L2 traffic: every block reads its rows and its weight columns through L2, so the bytes per
// FLOP fall as the tile grows (64 x 128 tiles kept L2 at 83-90 % of its throughput with the
// SMs a quarter to a third busy, Nsight Compute on a 4K-token prefill). The fused SwiGLU takes a
// warp's columns as 16 gate rows and the 16 up rows of the same intermediate features, so one
// lane holds both halves.
constexpr int kTileRows = kMoeTileRows, kTileCols = moe_tile::kTileCols, kKChunk = 64;
constexpr int kStages = 3;
constexpr int kWarpRows = 64, kWarpCols = 32;
constexpr int kGemmWarps = (kTileRows / kWarpRows) * (kTileCols / kWarpCols);
constexpr int kGemmThreads = kGemmWarps * 32;
constexpr int kNFrags = kWarpCols / 8;   // n8 fragments of a warp
constexpr int kMFrags = kWarpRows / 16;  // m16 fragments of a warp
constexpr int kStride = kKChunk + 8;
constexpr int kVecsPerRow = kKChunk / 8;              // 16-byte copies per row and chunk
constexpr int kRowStep = kGemmThreads / kVecsPerRow;  // rows one sweep of the block copies
constexpr int kStageElems = (kTileRows + kTileCols) * kStride;
constexpr int kSwigluCols = kTileCols / 2;  // intermediate features of a fused-SwiGLU tile
static_assert(kTileRows % kRowStep == 0 && kTileCols % kRowStep == 0 && kRowStep % 16 == 0);
static_assert(kWarpCols == 32 && kKChunk % 32 == 0);  // the SwiGLU split; whole B fragments

// The sweep of one k-chunk's copies into a pipeline stage: rows row0, row0 + kRowStep, ... of the
// tile (only the m16 fragments in use; rows past the tile's end zero-filled) and the kTileCols
// weight rows (past the weights or k: zero-filled).
struct ChunkLoader : moe_tile::ChunkSources<kTileRows, kTileCols, kRowStep, kVecsPerRow> {
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
      const int c = row0 + i * kRowStep;
      const bool valid = k_in && wrows[i] != nullptr;
      ptx::cp_async16_l2_256(ws + c * kStride + vec * 8, valid ? wrows[i] + kk : any, valid);
    }
  }
};

// acc[mf] += the warp's rows mf*16.. (its first `frags` fragments) · its columns over one k-chunk
// of a stage, 16 k at a time in order (mma.sync m16n8k16, fp32 accumulators). Each 32-k slice's
// B fragments load once and serve every row fragment: the shared-memory reads per weight byte
// stay low enough that a decoding step's few row fragments remain bound by the weights' DRAM
// stream.
__device__ __forceinline__ void chunk_mma(const bf16* stage, int frags, int warp_row, int warp_col,
                                          int lane, float (&acc)[kMFrags][kNFrags][4]) {
  using namespace ptx;
  const bf16* xs = stage + warp_row * kWarpRows * kStride;
  const bf16* ws = stage + (kTileRows + warp_col * kWarpCols) * kStride;
#pragma unroll
  for (int kp = 0; kp < kKChunk / 32; ++kp) {
    uint32_t b[kNFrags][4];  // b0, b1 of k 32kp.. and of 32kp + 16..
#pragma unroll
    for (int nt = 0; nt < kNFrags; ++nt)
      ldmatrix_x4(b[nt], b_fragment_row<kStride>(ws, nt, lane) + kp * 32);
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf) {
      if (mf >= frags) break;
      uint32_t a[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h)
        ldmatrix_x4(a[h], a_fragment_row(xs + mf * 16 * kStride + kp * 32 + h * 16, kStride, lane));
#pragma unroll
      for (int nt = 0; nt < kNFrags; ++nt) {
        mma_bf16(acc[mf][nt], a[0], b[nt][0], b[nt][1]);
        mma_bf16(acc[mf][nt], a[1], b[nt][2], b[nt][3]);
      }
    }
  }
}

// The tile's outputs from the lane's accumulators: lane l holds rows l / 4 (+ 8) and columns
// 2 (l % 4) (+ 1) of each fragment. With the SwiGLU, fragments nt and nt + 2 hold the gate and
// the up products of the same features.
__device__ __forceinline__ void store_tile(const MoeGemmParams& p, const moe_tile::Item& it,
                                           int col_tile, int warp_row, int warp_col, int lane,
                                           const float (&acc)[kMFrags][kNFrags][4]) {
#pragma unroll
  for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = warp_row * kWarpRows + mf * 16 + lane / 4 + (i >= 2 ? 8 : 0);
      if (r >= it.rows) continue;
      const int64_t a = it.a0 + r;
      const int col_in_warp = 2 * (lane % 4) + (i & 1);
      if (p.swiglu) {
#pragma unroll
        for (int nt = 0; nt < kNFrags / 2; ++nt)
          moe_tile::store_swiglu(p, a,
                                 col_tile * kSwigluCols + warp_col * 16 + nt * 8 + col_in_warp,
                                 acc[mf][nt][i], acc[mf][nt + kNFrags / 2][i]);
      } else {
#pragma unroll
        for (int nt = 0; nt < kNFrags; ++nt)
          moe_tile::store(p, a, col_tile * kTileCols + warp_col * kWarpCols + nt * 8 + col_in_warp,
                          acc[mf][nt][i]);
      }
    }
}

// Tensor-core grouped GEMM. Graph-safe: the grid is fixed on the host — as many work items as
// there can be (moe_work_list_ints) by the column tiles — and blocks past moe_sort's list exit at
// once. Every expert's rows spread over as many blocks as they fill tiles, so a skewed routing (a
// decoding block's alike [MASK] rows crowd a few experts) still fills the GPU. Batch invariant:
// every output element is the same chain of mma over k = 0, 16, 32, ... from a zero fp32
// accumulator whatever the other rows of its tile are, and the tile's row count only decides how
// many m16 fragments run, never the arithmetic of one. 2 blocks a multiprocessor (their shared
// memory fits; registers capped to match).
__global__ void __launch_bounds__(kGemmThreads, 2) moe_gemm_kernel(MoeGemmParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  if (static_cast<int>(blockIdx.x) >= p.work[0]) return;
  const moe_tile::Item it = moe_tile::work_item(p, static_cast<int>(blockIdx.x));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, col_tile = blockIdx.y;
  const int warp_row = warp / (kTileCols / kWarpCols), warp_col = warp % (kTileCols / kWarpCols);
  const int frags = min(kMFrags, max(0, (it.rows - warp_row * kWarpRows + 15) / 16));
  const int chunks = (p.k + kKChunk - 1) / kKChunk;
  ChunkLoader ld;
  ld.set<kWarpCols>(p, it, col_tile);
  float acc[kMFrags][kNFrags][4] = {};
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
    chunk_mma(smem + (c % kStages) * kStageElems, frags, warp_row, warp_col, lane, acc);
  }
  store_tile(p, it, col_tile, warp_row, warp_col, lane, acc);
}

// One output element a thread, a block per (token, 256 features): a decoding step's few tokens
// still spread over the GPU. The sum's order is moe_combine's contract (kernels.h).
__global__ void moe_combine_kernel(const float* y, const int32_t* position, const float* weights,
                                   int top_k, int hidden, bool extra, float* out, bool accumulate) {
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  const int t = blockIdx.x, d = blockIdx.y * blockDim.x + threadIdx.x;
  if (d >= hidden) return;
  const int64_t at = static_cast<int64_t>(t) * hidden + d;
  float sum = accumulate ? out[at] : 0.0f;
  if (extra) sum += y[at];  // the shared expert's row: sorted position t
  for (int j = 0; j < top_k; ++j) {
    const int a = t * top_k + j;
    if (position[a] < 0) continue;  // an expert this rank does not hold
    sum += weights[a] * y[static_cast<int64_t>(position[a]) * hidden + d];
  }
  out[at] = sum;
}

}  // namespace

void moe_sort(const int32_t* experts, int n, int top_k, int first_expert, int num_experts,
              bool extra, int32_t* offsets, int32_t* order, int32_t* position, int32_t* work,
              int32_t* scratch, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > (extra ? 1023 : 1024))
    fail("moe_sort: ", num_experts, " experts (the CUDA dispatch handles 1..1024, 1..1023 with",
         " the shared expert as one more)");
  if (int64_t{n} * (top_k + 1) > int64_t{kMoeTileRows} << 21)  // a work item's tile: 21 bits
    fail("moe_sort: ", int64_t{n} * top_k, " assignments (the CUDA dispatch handles up to ",
         (int64_t{kMoeTileRows} << 21) / (top_k + 1) * top_k, ")");
  const int assignments = n * top_k, extra_rows = extra ? n : 0;
  const int warps = sort_warps(num_experts);
  const dim3 threads(static_cast<unsigned>(warps * 32));
  if (scratch == nullptr || assignments <= kMoeSortOneBlockMax) {
    const size_t smem = (size_t(warps + 2) * num_experts + 1) * sizeof(int32_t);
    launch_pdl(moe_sort_kernel, dim3(1), threads, smem, stream, experts, assignments, top_k,
               extra_rows, first_expert, num_experts, offsets, order, position, work);
    DLLM_CUDA_LAUNCH_CHECK();
    return;
  }
  const int blocks = (assignments + kSortBlockAssignments - 1) / kSortBlockAssignments;
  const size_t segment_smem = size_t(warps + 1) * num_experts * sizeof(int32_t);
  launch_pdl(moe_sort_count_kernel, dim3(static_cast<unsigned>(blocks)), threads, segment_smem,
             stream, experts, assignments, first_expert, num_experts, scratch);
  launch_pdl(moe_sort_scan_kernel, dim3(1), dim3(256),
             (size_t(2) * num_experts + 1) * sizeof(int32_t), stream, blocks, top_k, extra_rows,
             num_experts, scratch, offsets, order, work);
  launch_pdl(moe_sort_place_kernel, dim3(static_cast<unsigned>(blocks)), threads, segment_smem,
             stream, experts, assignments, first_expert, num_experts,
             static_cast<const int32_t*>(scratch), order, position);
  DLLM_CUDA_LAUNCH_CHECK();
}

void moe_grouped_gemm(const MoeGemmParams& p, cudaStream_t stream) {
  if (p.experts < 1 || p.experts > 1024 || p.n_out < 1 || p.k < 1)
    fail("moe_grouped_gemm: shape outside the kernel's range (experts ", p.experts, ", n_out ",
         p.n_out, ", k ", p.k, "; experts 1..1024, n_out and k >= 1)");
  if (p.k % 8 != 0) fail("moe_grouped_gemm: k = ", p.k, " must be a multiple of 8 (16-byte rows)");
  if (p.swiglu && (p.n_out % 2 != 0 || p.out_f32))
    fail("moe_grouped_gemm: the fused SwiGLU needs an even n_out (gate and up halves; got ",
         p.n_out, ") and a bf16 output");
  if (reinterpret_cast<uintptr_t>(p.in) % 16 != 0 || reinterpret_cast<uintptr_t>(p.w) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.extra_w) % 16 != 0)
    fail("moe_grouped_gemm: in, w and extra_w must be 16-byte aligned (cp.async rows)");
  if (p.extra_rows < 0 || (p.extra_rows > 0 && (p.extra_w == nullptr || p.experts > 1023)))
    fail("moe_grouped_gemm: extra_rows = ", p.extra_rows, " needs extra_w and <= 1023 experts");
  if (p.work == nullptr) fail("moe_grouped_gemm: no work list (moe_sort's `work`)");
  if (p.assignments < 0) fail("moe_grouped_gemm: assignments = ", p.assignments, " (must be >= 0)");
  const int64_t cols = p.swiglu ? p.n_out / 2 : p.n_out;
  const int64_t tile_cols = p.swiglu ? kSwigluCols : kTileCols;  // both kernels' (moe_tile)
  const int64_t col_tiles = (cols + tile_cols - 1) / tile_cols;
  if (col_tiles > 65535)
    fail("moe_grouped_gemm: n_out = ", p.n_out, " needs more than 65535 column tiles");
  const int64_t items = moe_work_list_ints(p.assignments, p.experts, p.extra_rows) - 2;
  if (items > INT32_MAX) fail("moe_grouped_gemm: ", p.assignments, " assignments are too many");
  if (items == 0) return;  // no rows
#ifdef DLLM_HAVE_SM90A
  // wgmma where k is long (gate/up: 2048 at LLaDA2-mini's shape, 1.28x the mma.sync kernel at
  // 4096 tokens); its deeper prologue lost on the down GEMM's k = 512 (H200 probe: 483 vs 471 µs
  // at 4096 tokens, 235 vs 202 at 1024).
  if (p.k >= kSm90MoeMinK && sm90_moe_gemm_serves()) {
    sm90_moe_grouped_gemm(p, static_cast<unsigned>(items), static_cast<unsigned>(col_tiles),
                          stream);
    return;
  }
#endif
  constexpr size_t smem = size_t{kStages} * kStageElems * sizeof(bf16);
  static_assert(smem > 48 * 1024);  // above the default limit: opt in, once
  static PerDevice<bool> configured;
  configured.get([] {
    DLLM_CUDA_CHECK(cudaFuncSetAttribute(
        moe_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  });
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(col_tiles));
  launch_pdl(moe_gemm_kernel, grid, dim3(kGemmThreads), smem, stream, p);
  DLLM_CUDA_LAUNCH_CHECK();
}

void moe_combine(const float* y, const int32_t* position, const float* weights, int n, int top_k,
                 int hidden, bool extra, float* out, bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>(n),
                  static_cast<unsigned>((hidden + kThreads - 1) / kThreads));
  launch_pdl(moe_combine_kernel, grid, dim3(kThreads), 0, stream, y, position, weights, top_k,
             hidden, extra, out, accumulate);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
