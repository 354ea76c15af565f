// The MoE grouped GEMM on Hopper tensor cores (wgmma). A block owns one work item of moe_sort's
// list — up to 128 sorted rows of one expert — and 128 output columns; its two warpgroups take 64
// rows each and issue m64n64k16 wgmma over the columns' two halves. k goes in chunks of 64 through
// a 3-stage cp.async ring of 128-byte-swizzled tiles (rows gathered through `order`, the weight
// rows of the block's columns), two chunks ahead of the math. The mma.sync kernel (moe_ffn.cu)
// reached ~190 TFLOP/s on 128 requests' rows with 8 warps a multiprocessor waiting on their
// shared-memory fragments; wgmma reads its operands from shared memory itself.
//
// Batch invariant: every output element is one fp32 accumulator through wgmma k-steps of 16 in
// order from zero, whatever the other rows of its tile (the rows of a 64-row warpgroup tile are
// independent of each other in the product; rows past the tile's end hold stale data and are not
// stored).
#include "backend/cuda/moe_gemm_sm90.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/moe_gemm_tile.cuh"
#include "backend/cuda/pdl_launch.h"
#include "backend/cuda/per_device.h"
#include "backend/cuda/wgmma_ptx.cuh"

namespace dllm::cuda {

namespace {

constexpr int kTileRows = kMoeTileRows, kTileCols = moe_tile::kTileCols, kKChunk = 64;
constexpr int kStages = 3;
constexpr int kThreads = 256;                        // two warpgroups of 64 rows
constexpr int kVecsPerRow = kKChunk / 8;             // 16-byte copies a row and chunk
constexpr int kRowStep = kThreads / kVecsPerRow;     // rows one sweep of the copies covers
constexpr uint32_t kOperandBytes = 128 * 128;        // 128 rows (or columns) x 64 k of bf16
constexpr uint32_t kStageBytes = 2 * kOperandBytes;  // the rows, then the weight columns
constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + 1024;  // + alignment slack
static_assert(kTileRows == 128 && kTileCols == 128 && kKChunk * 2 == 128,
              "two warpgroups of 64 rows, two n64 halves, 128-byte swizzle rows");

// Byte offset of 16-byte chunk c (k 8c .. 8c+7) of row r in a 128-byte-swizzled operand tile.
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// A thread's share of each chunk's copies: 16-byte chunk `vec` of rows row0, row0 + kRowStep, ...
// of the tile's input rows and of its weight columns (zero-filled past k, the rows, the weights).
struct Loader : moe_tile::ChunkSources<kTileRows, kTileCols, kRowStep, kVecsPerRow> {
  __device__ void load(int chunk, unsigned char* stage) const {
    const int kk = chunk * kKChunk + vec * 8;
    const bool k_in = kk < k;
#pragma unroll
    for (int i = 0; i < kTileRows / kRowStep; ++i) {
      const int r = row0 + i * kRowStep;
      if (r >= used_rows) break;
      const bool valid = k_in && rows[i] != nullptr;
      ptx::cp_async16(stage + swizzled(r, vec), valid ? rows[i] + kk : any, valid);
    }
#pragma unroll
    for (int i = 0; i < kTileCols / kRowStep; ++i) {
      const int c = row0 + i * kRowStep;
      const bool valid = k_in && wrows[i] != nullptr;
      ptx::cp_async16_l2_256(stage + kOperandBytes + swizzled(c, vec), valid ? wrows[i] + kk : any,
                             valid);
    }
  }
};

// acc[h] += the warpgroup's 64 rows · the block's columns 64h .. 64h + 63 over one k-chunk, 16 k at
// a time in order. The caller waits for the wgmma.
__device__ __forceinline__ void issue_chunk(uint32_t rows_addr, uint32_t cols_addr,
                                            float (&acc)[2][32]) {
  const uint64_t rows_desc = wgmma::desc_sw128(rows_addr, 16, 1024);
  const uint64_t cols_desc = wgmma::desc_sw128(cols_addr, 16, 1024);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kKChunk / 16; ++kk) {
    const uint64_t da = wgmma::desc_advance(rows_desc, kk * 32);
#pragma unroll
    for (int h = 0; h < 2; ++h)
      wgmma::mma_m64n64k16_ss(acc[h], da, wgmma::desc_advance(cols_desc, h * 64 * 128 + kk * 32),
                              true);
  }
  wgmma::commit();
}

// The warpgroup's outputs. Lane l of warp w holds, in acc[h][4i .. 4i + 3], rows (w % 4) * 16 +
// l / 4 (+ 8 for the last two) and columns 64h + 8i + 2 (l % 4) (+ 1). With the SwiGLU the two
// halves are the gate and the up products of the same 64 features.
__device__ __forceinline__ void store_tile(const MoeGemmParams& p, const moe_tile::Item& it,
                                           int col_tile, int wg, const float (&acc)[2][32]) {
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = wg * 64 + warp * 16 + lane / 4 + (e >= 2 ? 8 : 0);
      if (r >= it.rows) continue;
      const int col = 8 * i + 2 * (lane % 4) + (e & 1);
      if (p.swiglu) {
        moe_tile::store_swiglu(p, it.a0 + r, col_tile * (kTileCols / 2) + col, acc[0][4 * i + e],
                               acc[1][4 * i + e]);
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          moe_tile::store(p, it.a0 + r, col_tile * kTileCols + 64 * h + col, acc[h][4 * i + e]);
      }
    }
}

__global__ void __launch_bounds__(kThreads, 2) moe_gemm_sm90_kernel(MoeGemmParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  ptx::wait_for_primary_grid();  // a programmatic dependent launch (pdl_launch.h)
  if (static_cast<int>(blockIdx.x) >= p.work[0]) return;
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (1024u - (raw_addr & 1023u)) & 1023u;  // swizzle atoms: 1024-aligned
  unsigned char* smem = smem_raw + pad;
  const uint32_t smem_addr = raw_addr + pad;
  const moe_tile::Item it = moe_tile::work_item(p, static_cast<int>(blockIdx.x));
  const int wg = threadIdx.x / 128, col_tile = static_cast<int>(blockIdx.y);
  const bool wg_has_rows = it.rows > wg * 64;
  Loader ld;
  ld.set<kTileCols>(p, it, col_tile);
  float acc[2][32] = {};
  const int chunks = (p.k + kKChunk - 1) / kKChunk;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) ld.load(s, smem + s * kStageBytes);
    ptx::cp_async_commit();
  }
  for (int c = 0; c < chunks; ++c) {
    ptx::cp_async_wait<kStages - 2>();  // this thread's copies of chunk c have landed ...
    wgmma::fence_proxy_async();         // ... are visible to wgmma ...
    __syncthreads();  // ... for every thread; and every warpgroup is done with chunk c - 1
    const int next = c + kStages - 1;  // into chunk c - 1's stage
    if (next < chunks) ld.load(next, smem + (next % kStages) * kStageBytes);
    ptx::cp_async_commit();
    if (wg_has_rows) {
      const uint32_t stage = smem_addr + (c % kStages) * kStageBytes;
      issue_chunk(stage + wg * 64 * 128, stage + kOperandBytes, acc);
      wgmma::wait<0>();
      wgmma::fence_registers(acc[0]);
      wgmma::fence_registers(acc[1]);
    }
  }
  if (wg_has_rows) store_tile(p, it, col_tile, wg, acc);
#endif
}

}  // namespace

bool sm90_moe_gemm_serves() {
  static const bool enabled = env_switch_on("DLLM_MOE_SM90");
  return enabled && device_compute_capability() == 90;  // sm_90a code runs on 9.0 only
}

void sm90_moe_grouped_gemm(const MoeGemmParams& p, unsigned items, unsigned col_tiles,
                           cudaStream_t stream) {
  static PerDevice<bool> configured;
  configured.get([] {
    DLLM_CUDA_CHECK(cudaFuncSetAttribute(moe_gemm_sm90_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSmemBytes)));
    return true;
  });
  launch_pdl(moe_gemm_sm90_kernel, dim3(items, col_tiles), dim3(kThreads), kSmemBytes, stream, p);
  DLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace dllm::cuda
