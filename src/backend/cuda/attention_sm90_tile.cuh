// One key tile of the Hopper flash-attention kernels (attention_sm90.cu: split / decode blocks,
// attention_ws_sm90.cu: the warp-specialised kernel): the shared-memory layout wgmma reads,
// S = Q Kᵀ, the mask, P's register fragments and O += P V. Both kernels run a row's tiles
// through these same steps, so they give the same bits; they differ only in who loads the tiles
// and how the steps overlap. Only compiled into the sm_90a object.
#pragma once

#include <climits>
#include <cstdint>

#include "backend/cuda/attention_mask.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/wgmma_ptx.cuh"

namespace dllm::cuda::sm90 {

constexpr int kD = 128;  // head_dim

// A tile of `rows` rows x 128 dims is stored as two 128-byte-swizzled 64-dim halves of rows x
// 128 bytes: half_bytes(rows) apart.
constexpr uint32_t half_bytes(int rows) {
  return static_cast<uint32_t>(rows) * 128;
}
constexpr uint32_t kQTile = 2 * half_bytes(64);  // 64 query rows (one warpgroup's)

// Byte offset of 16-byte chunk c (of 16: dims 8c..8c+7) of row r in a tile of `rows` rows.
template <int ROWS>
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  return (c >> 3) * half_bytes(ROWS) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
}

// Issues S = Q Kᵀ for the warpgroup's 64 rows and the KT keys of a tile (KT / 8 n8 chunks per
// lane, the mma.sync m16n8 layout): 8 wgmma over the 128 dims. The caller commits and waits.
template <int KT>
__device__ __forceinline__ void issue_scores(float (&s_flat)[KT / 2], uint32_t q_addr,
                                             uint32_t k_addr) {
#pragma unroll
  for (int i = 0; i < KT / 2; ++i) s_flat[i] = 0.0f;
  wgmma::fence();
  const uint64_t q_desc = wgmma::desc_sw128(q_addr, 16, 1024);
  const uint64_t k_desc = wgmma::desc_sw128(k_addr, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    // Dims 16kk..16kk+15: which half, and 32 bytes per step inside it.
    const uint64_t da = wgmma::desc_advance(q_desc, (kk >> 2) * half_bytes(64) + (kk & 3) * 32);
    const uint64_t db = wgmma::desc_advance(k_desc, (kk >> 2) * half_bytes(KT) + (kk & 3) * 32);
    if constexpr (KT == 64)
      wgmma::mma_m64n64k16_ss(s_flat, da, db, kk > 0);
    else
      wgmma::mma_m64n32k16_ss(s_flat, da, db, kk > 0);
  }
}

// mask_scores() under block-causal where key j sits at position j (a cold prefill): row r sees
// keys j < (r's block + 1) * block size, the same keys key_visible() lets through — without its
// shared-memory position load and division per key (a block-causal prefill's diagonal tiles).
template <int KT, class P>
__device__ __forceinline__ void mask_block_causal_by_index(const P& p, float (&s_flat)[KT / 2],
                                                           int t0, int k_end, const MaskRow& row_a,
                                                           const MaskRow& row_b, int lane) {
  const int end_a = row_a.valid ? min(k_end, (row_a.qblk + 1) * p.block_size) : 0;
  const int end_b = row_b.valid ? min(k_end, (row_b.qblk + 1) * p.block_size) : 0;
#pragma unroll
  for (int i = 0; i < KT / 2; ++i) {
    const int j = t0 + (i >> 2) * 8 + (lane % 4) * 2 + (i & 1);
    if (j >= ((i & 2) ? end_b : end_a)) s_flat[i] = -INFINITY;
  }
}

// Sets the scores of keys [t0, t0 + KT) a lane's rows may not see to -inf (scores stay unscaled:
// the scale folds into the exponent). kp: the tile's key positions. BY_INDEX: a cold block-causal
// prefill's keys are masked by index (mask_block_causal_by_index(), the same mask) — in the
// warp-specialised kernel's block-causal instance only: elsewhere it added spills or slowed causal
// prompts.
template <int KT, bool BY_INDEX = false, class P>
__device__ __forceinline__ void mask_scores(const P& p, float (&s_flat)[KT / 2], const int* kp,
                                            int t0, int k_end, int n_cache, int n_keys,
                                            const MaskRow& row_a, const MaskRow& row_b, int lane) {
  if (BY_INDEX && p.kind == MaskKind::kBlockCausal && keys_at_positions(p)) {
    const int tile_max = (t0 + KT - 1) / p.block_size;
    if (!tile_all_visible(p, t0, KT, k_end, n_cache, tile_max, min(row_a.qblk, row_b.qblk)))
      mask_block_causal_by_index<KT>(p, s_flat, t0, k_end, row_a, row_b, lane);
    return;
  }
  int tile_max = INT_MIN;  // the largest mask value of the tile's keys (block-causal needs it)
  if (p.kind == MaskKind::kBlockCausal) {
    if (keys_at_positions(p)) {  // key j at position j: by index, no division per key
      tile_max = (t0 + KT - 1) / p.block_size;
    } else {
#pragma unroll
      for (int c = lane; c < KT; c += 32) tile_max = max(tile_max, key_mask_value_of(p, kp[c]));
      tile_max = __reduce_max_sync(0xffffffffu, tile_max);
    }
  }
  if (tile_all_visible(p, t0, KT, k_end, n_cache, tile_max, min(row_a.qblk, row_b.qblk))) return;
#pragma unroll
  for (int i = 0; i < KT / 2; ++i) {
    const int col = (i >> 2) * 8 + (lane % 4) * 2 + (i & 1);
    if (!key_visible(p, (i & 2) ? row_b : row_a, t0 + col, key_mask_value_of(p, kp[col]), k_end,
                     n_cache, n_keys))
      s_flat[i] = -INFINITY;
  }
}

// P's bf16 A fragments (keys 16t..16t+15) straight from the probabilities in S's registers.
template <int KT>
__device__ __forceinline__ void pack_probabilities(const float (&s)[KT / 8][4],
                                                   uint32_t (&a)[KT / 16][4]) {
#pragma unroll
  for (int t = 0; t < KT / 16; ++t) {
    a[t][0] = ptx::pack_bf16(s[2 * t][0], s[2 * t][1]);
    a[t][1] = ptx::pack_bf16(s[2 * t][2], s[2 * t][3]);
    a[t][2] = ptx::pack_bf16(s[2 * t + 1][0], s[2 * t + 1][1]);
    a[t][3] = ptx::pack_bf16(s[2 * t + 1][2], s[2 * t + 1][3]);
  }
}

// Issues O += P V over a tile's KT keys (V MN-major). The caller commits and waits, and keeps
// `a` untouched until the wgmma complete (keep_fragments()).
template <int KT>
__device__ __forceinline__ void issue_values(float (&o_flat)[64], const uint32_t (&a)[KT / 16][4],
                                             uint32_t v_addr) {
  const uint64_t v_desc = wgmma::desc_sw128(v_addr, half_bytes(KT), 1024);
  wgmma::fence();
#pragma unroll
  for (int t = 0; t < KT / 16; ++t)  // keys 16t..: two 8-key atoms; the dim halves LBO apart
    wgmma::mma_m64n128k16_rs(o_flat, a[t], wgmma::desc_advance(v_desc, t * 16 * 128));
}

// After the wgmma reading `a` completed: keeps the compiler from reusing its registers earlier.
template <int KT>
__device__ __forceinline__ void keep_fragments(uint32_t (&a)[KT / 16][4]) {
#pragma unroll
  for (int t = 0; t < KT / 16; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[t][i])::"memory");
}

}  // namespace dllm::cuda::sm90
