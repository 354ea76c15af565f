// The AMX GEMM (gemm_amx.h states its arithmetic), compiled with -mamx-tile -mamx-bf16 and
// AVX-512 BF16 for the activations' split (CMakeLists.txt); callers check gemm_amx_available().
//
// Roles: the tile multiply-add C[16 × 16] += A[16 × 32] · B[32 × 16] takes the weights as A —
// sixteen weight rows, 32 bf16 values of k each, in their file layout — and the activations as B,
// which the unit wants pair-interleaved ("VNNI": row p of the tile holds, for each of 16
// activation rows, the values at k = 2p and 2p + 1). So C holds outᵀ; the activations are
// repacked once per call (m × k values against m × n × k products), and each 64-row block of
// weights is copied into tile order once per group of m tiles (pack_weights says why).
#include "backend/cpu/gemm_amx.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace dllm::cpu {
namespace {

constexpr int64_t kTile = 16;   // rows of an A tile (weight rows) and columns of a C tile
constexpr int64_t kChunk = 32;  // k values a tile row holds
constexpr int kParts = 3;       // hi, mid, lo
constexpr int64_t kPartValues = kTile * kChunk;  // bf16 values of one packed B tile (1 KiB)
constexpr int64_t kBlockTiles = 4;               // weight tiles a block: C tiles 0..3
constexpr int64_t kBlockCols = kBlockTiles * kTile;
// The packed activations of a group of m tiles (at most this many bytes) stay in L2 while every
// column block's weights pass them; a column block's weights stay in L2 while the group's m tiles
// pass them.
constexpr int64_t kGroupBytes = int64_t{1} << 20;
// Below this many multiply-adds one thread is faster (gemm_f32.cpp's threshold).
constexpr int64_t kParallelMacs = int64_t{1} << 20;

// The palette-1 configuration: all eight tiles 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tile configuration is per thread (the pool's threads run blocks too); it stays until released.
void configure_tiles() {
  thread_local bool configured = false;
  if (configured) return;
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = kTile;
  }
  _tile_loadconfig(&config);
  configured = true;
}

// Linux hands out the tile data state only on request (ARCH_REQ_XCOMP_PERM, once a process).
bool request_tile_state() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

__m512 widen(__m256bh v) {  // bf16 -> fp32, exact
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i&>(v)), 16));
}

// The 16 x 16 matrix of 32-bit words in v (row i = v[i]) transposed in place.
inline void transpose16(__m512i (&v)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // 2 x 2 blocks of words
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4)  // 4 x 4 blocks
    for (int j = 0; j < 2; ++j) {
      v[i + 2 * j] = _mm512_unpacklo_epi64(t[i + j], t[i + j + 2]);
      v[i + 2 * j + 1] = _mm512_unpackhi_epi64(t[i + j], t[i + j + 2]);
    }
  for (int i = 0; i < 16; i += 8)  // 8 x 8 blocks: 128-bit lanes
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_i32x4(v[i + j], v[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(v[i + j], v[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {  // 16 x 16: 256-bit halves
    v[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    v[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

// The activations as B tiles: [m tile][k chunk][part][16 k pairs][16 rows][2], rows past m and
// values past k zero. A row's 32 values of a chunk are, per part, 16 words of value pairs: the
// tile's column for that row, so the 16 rows' words are transposed into place.
void pack_activations(const float* a, int64_t lda, int64_t m, int64_t k, uint16_t* packed) {
  const int64_t m_tiles = (m + kTile - 1) / kTile, chunks = (k + kChunk - 1) / kChunk;
  parallel_for(m_tiles, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t rows = std::min(kTile, m - t * kTile);
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t k0 = c * kChunk, rem = std::min(kChunk, k - k0);
        const auto low = static_cast<__mmask16>(rem >= 16 ? 0xffff : (1u << rem) - 1);
        const auto high = static_cast<__mmask16>(rem <= 16 ? 0 : (1u << (rem - 16)) - 1);
        __m512 x0[kTile], x1[kTile];
        for (int64_t r = 0; r < kTile; ++r) {
          const float* row = a + (t * kTile + r) * lda + k0;
          x0[r] = r < rows ? _mm512_maskz_loadu_ps(low, row) : _mm512_setzero_ps();
          x1[r] = r < rows ? _mm512_maskz_loadu_ps(high, row + 16) : _mm512_setzero_ps();
        }
        uint16_t* dst = packed + (t * chunks + c) * kParts * kPartValues;
        for (int p = 0; p < kParts; ++p, dst += kPartValues) {
          __m512i words[kTile];
          for (int r = 0; r < kTile; ++r) {
            const __m512bh part = _mm512_cvtne2ps_pbh(x1[r], x0[r]);  // x0's 16 values, x1's
            words[r] = reinterpret_cast<const __m512i&>(part);
            x0[r] = _mm512_sub_ps(x0[r], widen(_mm512_cvtneps_pbh(x0[r])));  // exact remainders
            x1[r] = _mm512_sub_ps(x1[r], widen(_mm512_cvtneps_pbh(x1[r])));
          }
          transpose16(words);
          for (int i = 0; i < kTile; ++i) _mm512_storeu_si512(dst + i * 32, words[i]);
        }
      }
    }
  });
}

// GCC's tile intrinsics paste their register numbers into the instruction: literals only, hence
// the switches (on constants once inlined). run_block's tile registers: C 0..3, A (a weight tile)
// 4, B (a chunk's hi, mid, lo) 5..7.

// C tile c += A · (hi, mid, lo), in that order.
inline void multiply_parts(int c) {
  switch (c) {
    case 0:
      _tile_dpbf16ps(0, 4, 5);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(0, 4, 7);
      break;
    case 1:
      _tile_dpbf16ps(1, 4, 5);
      _tile_dpbf16ps(1, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      break;
    case 2:
      _tile_dpbf16ps(2, 4, 5);
      _tile_dpbf16ps(2, 4, 6);
      _tile_dpbf16ps(2, 4, 7);
      break;
    default:
      _tile_dpbf16ps(3, 4, 5);
      _tile_dpbf16ps(3, 4, 6);
      _tile_dpbf16ps(3, 4, 7);
  }
}

inline void store_c(int c, float* dst) {
  switch (c) {
    case 0:
      _tile_stored(0, dst, kTile * sizeof(float));
      break;
    case 1:
      _tile_stored(1, dst, kTile * sizeof(float));
      break;
    case 2:
      _tile_stored(2, dst, kTile * sizeof(float));
      break;
    default:
      _tile_stored(3, dst, kTile * sizeof(float));
  }
}

// The weights of a column block (rows [col0, col0 + cols), cols <= kBlockCols) as whole tiles:
// [chunk][tile][16 rows][32 values], rows past cols and values past k zero. Read in place, a
// tile's 16 rows lie ldw apart — with k a power of two a block's rows fall into a few L1 sets
// and evict each other (k = 1024: 2 sets) — and a tile past a row's end or the matrix's would
// read beyond it. Copied once a block, they are read by every m tile of the group from L1 / L2.
void pack_weights(const uint16_t* w, int64_t ldw, int64_t col0, int64_t cols, int64_t k,
                  uint16_t* packed) {
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  // Chunk outer: the copy's stores run in order (row outer, they went 4 KiB apart into one L1 set:
  // 10.8 against 16.2 GB/s copying SDAR-shaped weights from L3).
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t k0 = c * kChunk, rem = std::min(kChunk, k - k0);
    const auto mask = static_cast<__mmask32>(rem == kChunk ? 0xffffffffu : (1u << rem) - 1);
    for (int64_t r = 0; r < kBlockCols; ++r, packed += kChunk)
      _mm512_storeu_si512(packed, r < cols
                                      ? _mm512_maskz_loadu_epi16(mask, w + (col0 + r) * ldw + k0)
                                      : _mm512_setzero_si512());
  }
}

// out[r, j] (+)= c_tile[j][r] for the valid rows and columns: the tile transposed in registers,
// then a (masked) row store each.
inline void store_transposed(const float (&c_tile)[kTile][kTile], float* out, int64_t ldo,
                             int64_t rows, int64_t cols, bool accumulate) {
  __m512i v[kTile];
  for (int j = 0; j < kTile; ++j) v[j] = _mm512_load_si512(c_tile[j]);
  transpose16(v);
  const auto mask = static_cast<__mmask16>(cols == kTile ? 0xffff : (1u << cols) - 1);
  for (int64_t r = 0; r < rows; ++r) {
    __m512 sum = _mm512_castsi512_ps(v[r]);
    if (accumulate) sum = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, out + r * ldo), sum);
    _mm512_mask_storeu_ps(out + r * ldo, mask, sum);
  }
}

// Columns [col0, col0 + cols) (<= kBlockCols, weights packed by pack_weights) of m tile t: C
// tiles over every chunk, then out.
void run_block(const uint16_t* packed_a, int64_t t, int64_t m, const uint16_t* packed_w,
               int64_t col0, int64_t cols, int64_t k, float* out, int64_t ldo, bool accumulate) {
  configure_tiles();
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  const int64_t tiles = (cols + kTile - 1) / kTile;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const uint16_t* b = packed_a + t * chunks * kParts * kPartValues;
  const uint16_t* wt = packed_w;
  for (int64_t c = 0; c < chunks; ++c, b += kParts * kPartValues, wt += kBlockTiles * kPartValues) {
    _tile_loadd(5, b, 64);
    _tile_loadd(6, b + kPartValues, 64);
    _tile_loadd(7, b + 2 * kPartValues, 64);
    for (int i = 0; i < kBlockTiles; ++i)
      if (i < tiles) {
        _tile_loadd(4, wt + i * kPartValues, 64);
        multiply_parts(i);
      }
  }
  const int64_t rows = std::min(kTile, m - t * kTile);
  float* o = out + t * kTile * ldo + col0;
  // Every tile stored before any is read back (a read right after its tile store waited for it).
  alignas(64) float c_tiles[kBlockTiles][kTile][kTile];
  for (int i = 0; i < tiles; ++i) store_c(i, &c_tiles[i][0][0]);
  for (int i = 0; i < tiles; ++i)
    store_transposed(c_tiles[i], o + i * kTile, ldo, rows, std::min(kTile, cols - i * kTile),
                     accumulate);
}

// Tile `tmm` (a literal) of 16 weight rows [0, rows) and values [k0, k0 + values) of wr: read in
// place when whole, else through a zero-padded copy (never past a row's end or the matrix's).
#define DLLM_LOAD_WEIGHT_TILE(tmm, wr, ldw, rows, k0, values, stage)                             \
  do {                                                                                           \
    if ((rows) == kTile && (values) == kChunk) {                                                 \
      _tile_loadd(tmm, (wr) + (k0), (ldw)*2);                                                    \
    } else {                                                                                     \
      std::memset(stage, 0, sizeof(uint16_t) * kPartValues);                                     \
      for (int64_t r = 0; r < (rows); ++r)                                                       \
        std::memcpy((stage) + r * kChunk, (wr) + r * (ldw) + (k0), sizeof(uint16_t) * (values)); \
      _tile_loadd(tmm, stage, kChunk * 2);                                                       \
    }                                                                                            \
  } while (0)

// Up to two m tiles (rows [16 t0, 16 t0 + 32) of m) against up to two tiles of 16 weight rows,
// [row0, row0 + rows0) and the next rows1 (0: none): C tile 2 i + j holds m tile i against weight
// tile j. The weights are read in place, each row a sequential stream the hardware prefetches (32
// at once; copying 64-row blocks into tile order first, as the many-row path does, streamed them
// at 0.6-0.7x this rate, and software prefetches ahead of the tile loads changed nothing
// measurable). Four accumulators, because each element's multiply-adds are one chain of dependent
// tile instructions (~50 cycles each): the chains interleave. Tile registers: C 0..3, weights 4
// and 5, one part of each m tile's activations 6 and 7.
void run_tiles_in_place(const uint16_t* packed_a, int64_t t0, int64_t m, const uint16_t* w,
                        int64_t ldw, int64_t row0, int64_t rows0, int64_t rows1, int64_t k,
                        float* out, int64_t ldo, bool accumulate) {
  configure_tiles();
  alignas(64) uint16_t stage[kPartValues];
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  const bool two_m = m > (t0 + 1) * kTile, two_w = rows1 > 0;
  const uint16_t* w0 = w + row0 * ldw;
  const uint16_t* w1 = w0 + kTile * ldw;
  const int64_t tile_stride = chunks * kParts * kPartValues;  // one m tile's packed activations
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const uint16_t* b = packed_a + t0 * tile_stride;
  for (int64_t c = 0; c < chunks; ++c, b += kParts * kPartValues) {
    const int64_t k0 = c * kChunk, values = std::min(kChunk, k - k0);
    DLLM_LOAD_WEIGHT_TILE(4, w0, ldw, rows0, k0, values, stage);
    if (two_w) DLLM_LOAD_WEIGHT_TILE(5, w1, ldw, rows1, k0, values, stage);
    for (int p = 0; p < kParts; ++p) {  // hi, mid, lo: each element's order
      _tile_loadd(6, b + p * kPartValues, 64);
      if (two_m) _tile_loadd(7, b + tile_stride + p * kPartValues, 64);
      _tile_dpbf16ps(0, 4, 6);
      if (two_w) _tile_dpbf16ps(1, 5, 6);
      if (two_m) _tile_dpbf16ps(2, 4, 7);
      if (two_w && two_m) _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float c_tiles[4][kTile][kTile];
  for (int i = 0; i < 4; ++i)
    if ((i % 2 == 0 || two_w) && (i < 2 || two_m)) store_c(i, &c_tiles[i][0][0]);
  for (int i = 0; i < (two_m ? 2 : 1); ++i) {
    const int64_t rows = std::min(kTile, m - (t0 + i) * kTile);
    float* o = out + (t0 + i) * kTile * ldo + row0;
    store_transposed(c_tiles[2 * i], o, ldo, rows, rows0, accumulate);
    if (two_w) store_transposed(c_tiles[2 * i + 1], o + kTile, ldo, rows, rows1, accumulate);
  }
}

#undef DLLM_LOAD_WEIGHT_TILE

}  // namespace

bool gemm_amx_available() {
  static const bool ok = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
                         __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512bf16") && request_tile_state();
  return ok;
}

namespace {
std::atomic<int64_t> g_amx_weights{AmxThreshold{}.weights}, g_amx_min_k{AmxThreshold{}.min_k};
}  // namespace

void set_amx_threshold(AmxThreshold threshold) {
  g_amx_weights.store(threshold.weights, std::memory_order_relaxed);
  g_amx_min_k.store(threshold.min_k, std::memory_order_relaxed);
}

AmxThreshold amx_threshold() {
  return {g_amx_weights.load(std::memory_order_relaxed),
          g_amx_min_k.load(std::memory_order_relaxed)};
}

bool amx_pays_off(int64_t n, int64_t k) {
  const AmxThreshold t = amx_threshold();
  return n * k >= t.weights && k >= t.min_k;
}

void gemm_nt_amx(const float* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                 int64_t ldo, int64_t m, int64_t n, int64_t k, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  // Also asks for the tile state: without it the first tile instruction would fault.
  if (!gemm_amx_available()) fail("gemm_nt_amx: this CPU or kernel offers no AMX-BF16 tiles");
  const int64_t m_tiles = (m + kTile - 1) / kTile, chunks = (k + kChunk - 1) / kChunk;
  thread_local std::vector<uint16_t> scratch;  // calls run one at a time per thread
  scratch.resize(static_cast<size_t>(m_tiles * chunks * kParts * kPartValues));
  uint16_t* packed = scratch.data();  // the pool's threads read the caller's copy
  pack_activations(a, lda, m, k, packed);
  if (m_tiles <= 2) {  // few rows: the weights stream through once, 32 rows at a time
    const int64_t pairs = (n + 2 * kTile - 1) / (2 * kTile);
    const auto run = [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const int64_t row0 = i * 2 * kTile, rows = std::min(2 * kTile, n - row0);
        run_tiles_in_place(packed, 0, m, w, ldw, row0, std::min(kTile, rows),
                           std::max<int64_t>(0, rows - kTile), k, out, ldo, accumulate);
      }
    };
    if (m * n * k >= kParallelMacs && pairs > 1)
      parallel_for(pairs, run);
    else
      run(0, pairs);
    return;
  }
  // Blocks: (group of m tiles, column block), group major; within a block the group's m tiles one
  // after the other over the block's weights, copied into tile order once (pack_weights).
  const int64_t tile_bytes = chunks * kParts * kPartValues * int64_t{sizeof(uint16_t)};
  const int64_t group = std::clamp<int64_t>(kGroupBytes / tile_bytes, 1, m_tiles);
  const int64_t groups = (m_tiles + group - 1) / group;
  const int64_t col_blocks = (n + kBlockCols - 1) / kBlockCols;
  const auto blocks = [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t g = b / col_blocks, col0 = (b % col_blocks) * kBlockCols;
      const int64_t cols = std::min(kBlockCols, n - col0);
      thread_local std::vector<uint16_t> block_weights;
      block_weights.resize(static_cast<size_t>(chunks * kBlockTiles * kPartValues));
      pack_weights(w, ldw, col0, cols, k, block_weights.data());
      for (int64_t t = g * group; t < std::min(m_tiles, (g + 1) * group); ++t)
        run_block(packed, t, m, block_weights.data(), col0, cols, k, out, ldo, accumulate);
    }
  };
  if (m * n * k >= kParallelMacs && groups * col_blocks > 1)
    parallel_for(groups * col_blocks, blocks);
  else
    blocks(0, groups * col_blocks);
}

}  // namespace dllm::cpu
