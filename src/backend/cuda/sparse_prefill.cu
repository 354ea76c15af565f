// The sparse prefill kernel (sparse_prefill.h). One CTA per query tile: 4 warps x 16 rows = the
// tile's <= 64 rows (explicit row indices: grid and boundary heads permute rows by index loads),
// one query head. The CTA walks its tile's key spans in chunks of 64 keys, each chunk's keys
// addressed by the span (begin + i * step, or through the key map), K/V rows gathered into shared
// memory by cp.async one chunk ahead; the mask rule per (row, key) is the plan's: key <= limit(row)
// and the span's window. Scores, online softmax and P V are the dense mma.sync kernel's
// (mma_tile.cuh, flash_tile.cuh).
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/flash_tile.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/mma_tile.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/sparse_prefill.h"
#include "core/error.h"

namespace dllm::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kChunk = 64;  // keys per chunk

struct SparsePrefillArgs {
  const SparseTileDesc* tiles;
  const int32_t* rows;
  const KeySpan* spans;
  const int32_t* key_map;
  const int32_t* key_slots;  // null: key c is row c of k / v
  const bf16 *q, *k, *v;
  bf16* out;
  int n_tokens, block_size, heads, kv_heads;
  float scale_log2;
};

// Where the CTA is in its tile's span list: span index and key index within it.
struct SpanCursor {
  int span = 0, at = 0;
};

__device__ __forceinline__ void advance(SpanCursor& c, const KeySpan* spans) {
  c.at += kChunk;
  if (c.at >= spans[c.span].count) {
    ++c.span;
    c.at = 0;
  }
}

__device__ __forceinline__ int key_limit(int row, int n, int b) {
  return min(n - 1, (row / b + 1) * b - 1);
}

__device__ __forceinline__ bool admits(int c, int lim, int window) {
  if (c < 0 || c > lim) return false;
  if (window > 0) return c > lim - window;
  if (window < 0) return c <= lim + window;
  return true;
}

template <int D>
constexpr size_t sparse_smem_bytes() {
  return 2 * (2 * kChunk * (D + 8) * sizeof(bf16) + kChunk * sizeof(int) + 16);
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32) sparse_prefill_kernel(SparsePrefillArgs a) {
  using namespace ptx;
  constexpr int kStride = D + 8;
  constexpr int kTileElems = kChunk * kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);
  bf16* vs = ks + 2 * kTileElems;
  int* kpos = reinterpret_cast<int*>(vs + 2 * kTileElems);  // [2][kChunk], -1: no key
  int* kwin = kpos + 2 * kChunk;                            // [2] the chunk's span window

  const SparseTileDesc tile = a.tiles[blockIdx.x];
  const KeySpan* spans = a.spans + tile.first_span;
  const int h = tile.head, g = h / (a.heads / a.kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ra = warp * 16 + lane / 4, rb = ra + 8;
  const int row_a = ra < tile.row_count ? a.rows[tile.first_row + ra] : -1;
  const int row_b = rb < tile.row_count ? a.rows[tile.first_row + rb] : -1;
  const int lim_a = row_a >= 0 ? key_limit(row_a, a.n_tokens, a.block_size) : -1;
  const int lim_b = row_b >= 0 ? key_limit(row_b, a.n_tokens, a.block_size) : -1;
  const int64_t q_row = static_cast<int64_t>(a.heads) * D;
  const int64_t kv_row = static_cast<int64_t>(a.kv_heads) * D;

  int n_chunks = 0;
  for (int s = 0; s < tile.span_count; ++s) n_chunks += (spans[s].count + kChunk - 1) / kChunk;

  auto load_chunk = [&](int stage, const SpanCursor& c) {
    const KeySpan sp = spans[c.span];
    constexpr int kPieces = D / 8;  // 16-byte pieces per key row
    for (int i = threadIdx.x; i < kChunk * kPieces; i += kWarps * 32) {
      const int kr = i / kPieces, piece = i % kPieces, idx = c.at + kr;
      const bool valid = idx < sp.count;
      int key = 0;
      if (valid) {
        const int at = sp.begin + idx * sp.step;
        key = sp.map_offset >= 0 ? a.key_map[sp.map_offset + at] : at;
      }
      const int slot = valid && a.key_slots ? a.key_slots[key] : key;
      const int64_t off = static_cast<int64_t>(slot) * kv_row + g * D + piece * 8;
      cp_async16(&ks[stage * kTileElems + kr * kStride + piece * 8], a.k + off, valid);
      cp_async16(&vs[stage * kTileElems + kr * kStride + piece * 8], a.v + off, valid);
      if (piece == 0) kpos[stage * kChunk + kr] = valid ? key : -1;
    }
    if (threadIdx.x == 0) kwin[stage] = sp.window;
  };

  SpanCursor load_at;
  if (n_chunks > 0) load_chunk(0, load_at);
  cp_async_commit();
  if (n_chunks > 0) advance(load_at, spans);

  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int row = reg & 1 ? row_b : row_a;
      const int col = kk * 16 + (lane % 4) * 2 + (reg >= 2 ? 8 : 0);
      qf[kk][reg] =
          row >= 0 ? *reinterpret_cast<const uint32_t*>(a.q + row * q_row + h * D + col) : 0u;
    }

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int it = 0; it < n_chunks; ++it) {
    const int stage = it & 1;
    if (it + 1 < n_chunks) {
      load_chunk(stage ^ 1, load_at);
      advance(load_at, spans);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int* kp = kpos + stage * kChunk;
    const int window = kwin[stage];

    float s[kChunk / 8][4];
    tile_scores<D, kChunk, kStride>(qf, ks + stage * kTileElems, s, lane);
#pragma unroll
    for (int nt = 0; nt < kChunk / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = kp[nt * 8 + (lane % 4) * 2 + (e & 1)];
        if (!admits(c, e >= 2 ? lim_b : lim_a, window)) s[nt][e] = -INFINITY;
      }
    online_softmax_tile(s, o, m, l, a.scale_log2);
    tile_accumulate_pv<D, kChunk, kStride>(s, vs + stage * kTileElems, o, lane);
    __syncthreads();  // this stage is refilled at the next iteration's start
  }
  cp_async_wait<0>();

#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int row = h2 ? row_b : row_a;
    if (row < 0) continue;
    const float inv_l = l[h2] > 0.0f ? 1.0f / l[h2] : 0.0f;  // a row that sees nothing: zeros
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const int d = dn * 8 + (lane % 4) * 2;
      *reinterpret_cast<__nv_bfloat162*>(&a.out[row * q_row + h * D + d]) =
          __floats2bfloat162_rn(o[dn][2 * h2] * inv_l, o[dn][2 * h2 + 1] * inv_l);
    }
  }
}

template <int D>
void launch(const SparsePrefillArgs& args, int n_tiles, cudaStream_t stream) {
  constexpr size_t smem = sparse_smem_bytes<D>();
  static PerDevice<bool> configured;
  configured.get([] {
    DLLM_CUDA_CHECK(cudaFuncSetAttribute(sparse_prefill_kernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  });
  sparse_prefill_kernel<D><<<n_tiles, kWarps * 32, smem, stream>>>(args);
  DLLM_CUDA_CHECK(cudaGetLastError());
}

// Pageable host memory: cudaMemcpyAsync returns once the source is staged, so `h` may go.
template <class T>
void upload(DeviceBuffer<T>& d, const std::vector<T>& h, const char* what, cudaStream_t stream) {
  d.ensure(std::max<size_t>(h.size(), 1), what);
  if (!h.empty())
    DLLM_CUDA_CHECK(
        cudaMemcpyAsync(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
}

__global__ void gather_rows_kernel(const bf16* src, const int32_t* slots, bf16* dst, int n,
                                   int dim) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, total = int64_t{n} * dim;
  if (i >= total) return;
  const int64_t r = i / dim, c = i % dim;
  dst[i] = src[static_cast<int64_t>(slots[r]) * dim + c];
}

}  // namespace

void gather_rows_bf16(const bf16* src, const int32_t* slots, bf16* dst, int n, int dim,
                      cudaStream_t stream) {
  const int64_t total = int64_t{n} * dim;
  if (total == 0) return;
  constexpr int kThreads = 256;
  gather_rows_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0,
                       stream>>>(src, slots, dst, n, dim);
  DLLM_CUDA_CHECK(cudaGetLastError());
}

DeviceSparsePlan upload_sparse_plan(const SparsePrefillPlan& plan) {
  DeviceSparsePlan d;
  upload_sparse_plan(plan, d, nullptr);
  DLLM_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return d;
}

void upload_sparse_plan(const SparsePrefillPlan& plan, DeviceSparsePlan& d, cudaStream_t stream) {
  std::vector<SparseTileDesc> tiles;
  std::vector<int32_t> rows, key_map;
  std::vector<KeySpan> spans;
  for (size_t h = 0; h < plan.heads.size(); ++h) {
    const SparseHeadPlan& hp = plan.heads[h];
    const auto row_base = static_cast<int32_t>(rows.size());
    const auto span_base = static_cast<int32_t>(spans.size());
    const auto map_base = static_cast<int32_t>(key_map.size());
    for (const QueryTile& t : hp.tiles)
      tiles.push_back({static_cast<int32_t>(h), row_base + t.first_row, t.row_count,
                       span_base + t.first_span, t.span_count});
    rows.insert(rows.end(), hp.rows.begin(), hp.rows.end());
    for (KeySpan s : hp.spans) {
      if (s.map_offset >= 0) s.map_offset += map_base;
      spans.push_back(s);
    }
    key_map.insert(key_map.end(), hp.key_map.begin(), hp.key_map.end());
  }
  upload(d.tiles, tiles, "sparse prefill tiles", stream);
  upload(d.rows, rows, "sparse prefill rows", stream);
  upload(d.spans, spans, "sparse prefill spans", stream);
  upload(d.key_map, key_map, "sparse prefill key map", stream);
  d.n_tiles = static_cast<int32_t>(tiles.size());
  d.n_tokens = plan.n_tokens;
  d.block_size = plan.block_size;
  d.heads = static_cast<int32_t>(plan.heads.size());
}

void sparse_prefill_attention(const DeviceSparsePlan& plan, const bf16* q, const bf16* k,
                              const bf16* v, int heads, int kv_heads, int head_dim, bf16* out,
                              cudaStream_t stream, const int32_t* key_slots) {
  if (heads != plan.heads || kv_heads < 1 || heads % kv_heads != 0)
    fail("sparse_prefill_attention: heads (", heads, ") must equal the plan's (", plan.heads,
         ") and be a multiple of kv_heads (", kv_heads, ")");
  if (plan.n_tiles == 0) return;
  SparsePrefillArgs args{plan.tiles.get(),
                         plan.rows.get(),
                         plan.spans.get(),
                         plan.key_map.get(),
                         key_slots,
                         q,
                         k,
                         v,
                         out,
                         plan.n_tokens,
                         plan.block_size,
                         heads,
                         kv_heads,
                         1.4426950408889634f / std::sqrt(static_cast<float>(head_dim))};
  switch (head_dim) {  // 16 and 32: the embedded models' and the test fixtures'
    case 16:
      return launch<16>(args, plan.n_tiles, stream);
    case 32:
      return launch<32>(args, plan.n_tiles, stream);
    case 64:
      return launch<64>(args, plan.n_tiles, stream);
    case 128:
      return launch<128>(args, plan.n_tiles, stream);
    default:
      fail("sparse_prefill_attention: head_dim must be 16, 32, 64 or 128 (got ", head_dim, ")");
  }
}

}  // namespace dllm::cuda
