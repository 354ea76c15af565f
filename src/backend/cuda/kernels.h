// Host launchers of the CUDA kernels (bf16 storage, fp32 math). Each is tested against a naive
// CPU reference in tests/cuda/. All run on `stream`, asynchronously.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "decode/vocab_parallel_stats.h"

namespace dllm::cuda {

using bf16 = __nv_bfloat16;

// x[i, :] = float(table[tokens[i], :])
void embed(const int32_t* tokens, const bf16* table, float* x, int n, int hidden,
           cudaStream_t stream);

// out[r, :] = bf16(x[src_r, :] / rms(x[src_r, :]) * w) with src_r = rows ? rows[r] : r.
void rms_norm(const float* x, const int32_t* rows, const bf16* w, bf16* out, int n_rows, int dim,
              float eps, cudaStream_t stream);

// After the fused q|k|v GEMM: bias, per-head q/k RMSNorm, NeoX RoPE at explicit positions
// (first rotary_dim dims of each head), then q -> q_out (bf16 [n, heads*head_dim]) and k, v ->
// the cache rows of `slots` (bf16 [capacity, kv_heads*head_dim] of one layer). When
// slot_positions is set, positions[i] is also stored at slot_positions[slots[i]].
struct QkvPostParams {
  const float* qkv = nullptr;    // [n, (heads + 2 kv_heads) * head_dim]
  const float* bias = nullptr;   // [(heads + 2 kv_heads) * head_dim] or null
  const bf16* q_norm = nullptr;  // [head_dim] or null (no q/k norm)
  const bf16* k_norm = nullptr;
  const int32_t* positions = nullptr;  // [n]
  const int32_t* slots = nullptr;      // [n]
  const float* inv_freq = nullptr;     // [rotary_dim / 2]
  float rope_scale = 1.0f;             // cos and sin times this (YaRN's attention factor)
  bf16* q_out = nullptr;
  bf16* k_cache = nullptr;
  bf16* v_cache = nullptr;
  int32_t* slot_positions = nullptr;
  int n = 0, heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  float eps = 1e-6f;
};
void qkv_post(const QkvPostParams& p, cudaStream_t stream);

// out[i, j] = bf16(silu(gu[i, j]) * gu[i, inter + j]) for the fused gate|up GEMM output.
void swiglu(const bf16* gate_up, bf16* out, int n, int inter, cudaStream_t stream);

// Attention of one sequence's queries over its key list (flash attention with a split over keys
// and a combine pass). Keys are [visible cache entries | the queries' own slots], read through
// key_slots (or slots 0..n_keys-1 when null). n_keys is read from device memory so that a
// captured graph replays at any length up to max_keys.
enum class MaskKind : int { kCausal = 0, kBidirectional = 1, kBlockCausal = 2, kCustom = 3 };
struct AttentionParams {
  const bf16* q = nullptr;        // [n_q, heads * head_dim]
  const bf16* k_cache = nullptr;  // one layer, [capacity, kv_heads * head_dim]
  const bf16* v_cache = nullptr;
  const int32_t* key_slots = nullptr;       // [n_keys] or null
  const int32_t* n_keys = nullptr;          // device scalar
  const int32_t* slot_positions = nullptr;  // [capacity] logical position per slot
  const int32_t* q_positions = nullptr;     // [n_q]
  const uint8_t* custom_mask = nullptr;     // kCustom: [n_q, n_keys]
  // kCustom: custom_mask is [n_q, n_q] over the query keys only, and every cache key is visible
  // (lets fully visible cache tiles skip the per-key mask).
  bool custom_mask_queries_only = false;
  MaskKind kind = MaskKind::kCausal;
  int block_size = 0;
  int n_q = 0, max_keys = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  int splits = 1;  // key splits (blocks over the key range)
  // Per split and row (kv head x query x head of its group): O / l in bf16 — the combine weights
  // need only m and l in fp32, and bf16 halves the partial traffic that 30+ splits of a long
  // cache cost — and (m, l). attention_use_workspace() points both into one workspace.
  bf16* partial_o = nullptr;    // [splits, kv_heads * n_q * group, head_dim]
  float* partial_ml = nullptr;  // [splits, kv_heads * n_q * group, 2]
  bf16* out = nullptr;          // [n_q, heads * head_dim]
};
void attention(const AttentionParams& p, cudaStream_t stream);
// Workspace floats attention() needs for (n_q, heads, head_dim, splits).
size_t attention_workspace_floats(int n_q, int heads, int head_dim, int splits);
// Points p.partial_o and p.partial_ml into `workspace` (attention_workspace_floats(p.n_q, p.heads,
// p.head_dim, p.splits) floats) allocated by attention_workspace_ensure().
void attention_use_workspace(AttentionParams& p, float* workspace);
// Grows `workspace` to at least `floats` (attention_workspace_floats()); when it is (re)allocated,
// also zeroes the split counters it starts with (attention_split_counters()), which the kernels
// keep at zero between calls. True when the buffer moved.
bool attention_workspace_ensure(DeviceBuffer<float>& workspace, size_t floats, cudaStream_t stream);
// The Hopper kernel merges its splits itself where it can (attention_sm90.cu): per row block and
// KV head, two counters (splits arrived, splits merged) at the start of the workspace, in front of
// p.partial_ml. They are zero between calls: the last block of a call resets them. (Not a field of
// AttentionParams: one more pointer there cost the Hopper kernel 60 bytes of register spills.)
constexpr int kAttentionSplitCounters = 256;
__host__ __device__ inline int32_t* attention_split_counters(const AttentionParams& p) {
  return reinterpret_cast<int32_t*>(p.partial_ml) - kAttentionSplitCounters;
}
// A split count that fills the GPU for this shape.
int attention_splits(int n_q, int heads, int kv_heads, int head_dim, int max_keys, int num_sms);

// Batched paged attention: one call per layer for every sequence of a step. K and V of the layer
// live in one paged pool, bf16 [pool_slots, kv_heads * head_dim]; a sequence's logical slot s is
// physical slot page_table[s / page_size] * page_size + s % page_size. Query rows of the batch are
// flat: sequence i owns the next n_q rows of q / out / q_positions.
//
// Host side: attention_batch_plan() packs everything the kernels need — per-sequence descriptors,
// key lists (resolved to physical slots), page tables, custom masks (bytes), the work lists of
// (sequence, row block, split) of the two kernels, the query rows' sequences — into one int32
// region it appends to the caller's staging vector (layout: attention_batch_layout.h), which the
// caller copies to the device with its other small inputs. attention_batch() then launches the
// mma.sync kernel (sequences with < 64 rows per KV head, rows = n_q x heads / kv_heads, or any
// head_dim other than 128 / no Hopper), the Hopper kernel (head_dim 128, >= 64 rows) and one
// combine pass that merges the rows of every sequence of several splits — or, when the capacity
// is one wave of Hopper blocks and nothing else (a single long sequence), the Hopper kernel
// alone, its blocks merging their splits themselves (attention_batch_merges()). A sequence of one
// split has its output written by the attention kernel itself (no partials, nothing to merge).
// Grids that fit on the SMs at once (a lone sequence or a few) run the kernels with deeper
// pipelines, and a combine pass of few rows takes a block per row instead of a warp.
//
// CUDA graphs: grid sizes come from AttentionBatchCapacity only; counts, n_keys, key lists, page
// tables, masks and splits are read from the region on the device, and blocks of padding work
// exit at once. A captured call replays with any plan whose need the capacity covers, staged at
// the same device address. The kernels read the region before their programmatic-launch wait:
// copy it before the kernel preceding the call starts (e.g. at the start of the step).
//
// Batch invariance: a sequence's splits and key chunks depend on its own shape only
// (attention_batch_splits()), every sequence of a kernel kind uses one tile size (the pipeline
// depth and the rows a block takes do not change a row's arithmetic), and every row's splits are
// merged with the same arithmetic in the same order (attention_merge.cuh), by the combine pass
// (a warp or a block per row) or in the kernel — its output is the same, bit for bit, alone or
// in any batch, at any capacity.
struct AttentionBatchSeq {
  int n_q = 0;     // query rows: the next n_q rows of q / out / q_positions
  int n_keys = 0;  // keys = [n_keys - n_q visible cache entries | its n_q queries' own keys]
  std::span<const int32_t> key_slots;   // logical slot of each key; empty: key j is slot j
  std::span<const int32_t> page_table;  // physical page of each logical page; empty: slot s is
                                        // physical slot s (a contiguous cache)
  MaskKind kind = MaskKind::kCausal;
  int block_size = 0;
  std::span<const uint8_t> custom_mask;   // kCustom: [n_q, n_keys], or [n_q, n_q] when
  bool custom_mask_queries_only = false;  // every cache key is visible (as AttentionParams)
  // Sparse attention's gathered keys (sparse_select.h): each KV head reads its own list of
  // n_keys physical slots, which the planner only reserves (AttentionBatchPlan::device_keys_at,
  // kv_heads lists back to back) and a kernel fills on the device before the call — early
  // enough that the call's predecessor starts after it (the kernels read the region before
  // their programmatic-launch wait). Not with key_slots or a full custom mask.
  bool device_keys = false;
  // MAGE's hand-over (method-specs §1.6 step 1): also write each split's (m, l) over the cache
  // keys alone — keys [0, n_keys - n_q), before the queries' own — for every row, so that the
  // selection gets each row's prefix-only log-sum-exp without a pass of its own over K
  // (mage_prefix_lse_from_attention(), sparse_select.h). The outputs are the same bits either way.
  bool prefix_lse = false;
  // MAGE's selection from a few queries (with or without prefix_lse; at most
  // batch_layout::kMaxHandedScoreRows rows with their query heads): also write the raw scores q . k
  // (before the scale) of these query rows (ascending indices into its n_q) over the prefix keys,
  // for every query head, so that the selection's score sums read them instead of K
  // (mage_score_sum_from_scores(), sparse_select.h). Layout from AttentionBatchPlan::
  // prefix_scores_at: [kv_heads][score_queries.size() x G][batch_layout::prefix_score_stride(
  // n_keys - n_q)] floats. Every prefix key must be visible to every row (MAGE's rules: the cache
  // lies before the block). The outputs are the same bits either way.
  std::span<const int32_t> score_queries;
  // Its rows keep their place in q / out, but another kernel attends them (MMInference sparse
  // prefill: cuda_sparse_prefill.cpp): no work items, nothing written to its rows.
  bool attended_elsewhere = false;
  // Key j sits at position j (a cold prefill from position 0): the block-causal rule then hides
  // every key past an index from a row block (visible_keys_end(), attention_mask.cuh), and the
  // kernels skip those tiles, as they do under the causal rule, which is by index anyway.
  bool keys_at_positions = false;
};
struct AttentionBatchShape {
  int heads = 0, kv_heads = 0, head_dim = 0;
  int page_size = 16;      // a power of two, 8..256
  int64_t pool_slots = 0;  // physical slots of the pool: page tables are checked against it
  float scale = 1.0f;
};
// What a call needs (the plan's real counts) or may hold (the caller's capacities, e.g. the
// counts rounded up to a graph bucket).
struct AttentionBatchCapacity {
  int q_rows = 0;                   // query rows (the combine grid)
  int mma_items = 0;                // work items of the mma.sync kernel (its grid x KV heads)
  int sm90_items = 0;               // work items of the Hopper kernel
  int sm90_ws_items = 0;            // work items of the warp-specialised Hopper kernel
  int64_t partial_rows = 0;         // split partial rows (the workspace)
  int64_t prefix_rows = 0;          // prefix-only (m, l) rows (AttentionBatchParams::prefix_ml)
  int64_t prefix_score_floats = 0;  // raw prefix scores (AttentionBatchParams::prefix_scores)
  // Whether the call launches the combine pass: not where every sequence of several splits is a
  // serial item (batch_layout::kSerialSplit), which merges its own splits.
  bool combine = true;
  // Some warp-specialised items are a block-causal sequence's: that kernel's instance that masks
  // a cold block-causal prefill by index runs (attention_ws_sm90.cu). A launch choice only, not
  // a capacity: both instances compute every sequence, with the same bits.
  bool ws_block_causal = false;
  bool covers(const AttentionBatchCapacity& need) const {
    return q_rows >= need.q_rows && mma_items >= need.mma_items && sm90_items >= need.sm90_items &&
           sm90_ws_items >= need.sm90_ws_items && partial_rows >= need.partial_rows &&
           prefix_rows >= need.prefix_rows && prefix_score_floats >= need.prefix_score_floats &&
           (combine || !need.combine);
  }
};
struct AttentionBatchPlan {
  size_t offset = 0;  // where the region starts in the staging vector (int32 index)
  size_t ints = 0;    // its length
  AttentionBatchCapacity need;
  std::vector<int> splits;  // per sequence
  // Per sequence: where its reserved device_keys lists start (int32 from the region's start),
  // or -1.
  std::vector<int64_t> device_keys_at;
  // Per sequence: its first row of prefix-only (m, l) in AttentionBatchParams::prefix_ml (the
  // rows of split s, KV head h, query r, head gi of h's group: prefix_row + (s * kv_heads + h) *
  // n_q * G + r * G + gi), or -1 without prefix_lse.
  std::vector<int64_t> prefix_row;
  // Per sequence: its first float in AttentionBatchParams::prefix_scores, or -1 without
  // score_queries.
  std::vector<int64_t> prefix_scores_at;
};
// How a sequence's splits run: a block each, side by side (then merged by the combine pass or
// the Hopper kernel's in-kernel merge), or one block per row block and KV head computing them one
// after the other and merging them itself (a serial item: batch_layout::kSerialSplit). Both give
// the same bits, so the planner may choose per batch: kAuto takes serial items for the sequences
// of a kernel kind whose serial blocks fill the GPU DLLM_ATTN_BATCH_SERIAL_WAVES times (default
// 1.5) — big batches, where split blocks only add partial traffic, a combine pass and a prologue
// and Q load per split — and DLLM_ATTN_BATCH_SERIAL=on / off overrides it (tuning). Sequences
// of one split, of more than batch_layout::kMaxSerialSplits, and prefix_lse ones never run serial.
// Where split blocks run on the mma.sync kernel, they may run as split groups (batch_layout.h):
// `split_group` consecutive splits per block, still merged by the combine pass (the same bits
// again); 0 lets kAuto choose (kParallel: 1, a block per split).
enum class AttentionBatchSplitMode { kAuto, kParallel, kSerial };
AttentionBatchPlan attention_batch_plan(
    std::span<const AttentionBatchSeq> seqs, const AttentionBatchShape& shape,
    std::vector<int32_t>& staging, AttentionBatchSplitMode mode = AttentionBatchSplitMode::kAuto,
    int split_group = 0);
// A sequence's key splits: enough to fill the GPU with it alone, each split at least
// DLLM_ATTN_BATCH_MIN_TILES (default 4) key tiles and at least DLLM_ATTN_BATCH_KEYS_PER_ROW
// (default 3) keys per row per KV head, so that its partials (written and read back: ~rows / keys
// of its K/V traffic) and its blocks' fixed costs stay small in big batches; splits that the
// kernels' whole-tile shares would leave empty are dropped. The floors trade a lone short
// sequence's latency for a big batch's throughput — the measured trade-off (H100, SDAR-8B shapes)
// is in docs/benchmarks.md (2026-11-25): e.g. 16 keys per row and 16 tiles take 128 x 32 queries
// x 1K from 33 % to 56 % of copy bandwidth and 128 x 4 x 1K from 60 % to 71 %, but a lone 32-query
// block over 1K keys from 25 to 52 µs. Long contexts are split by the wave bound alone.
int attention_batch_splits(int n_q, int n_keys, const AttentionBatchShape& shape);
// Workspace floats for `partial_rows` split rows (capacity.partial_rows): the in-kernel merge's
// counters, then the split partials.
size_t attention_batch_workspace_floats(int64_t partial_rows, int head_dim);
// Grows `workspace` to at least `floats`; when it is (re)allocated, zeroes the counters it
// starts with (the kernels keep them zero between calls). True when the buffer moved.
bool attention_batch_workspace_ensure(DeviceBuffer<float>& workspace, size_t floats,
                                      cudaStream_t stream);
struct AttentionBatchParams {
  const bf16* q = nullptr;       // [q_rows, heads * head_dim]
  const bf16* k_pool = nullptr;  // one layer, [pool_slots, kv_heads * head_dim]
  const bf16* v_pool = nullptr;
  const int32_t* slot_positions = nullptr;  // [pool_slots] logical position per PHYSICAL slot
  const int32_t* q_positions = nullptr;     // [q_rows]
  const int32_t* plan = nullptr;  // device address of the staged region (not of the staging start)
  float* workspace = nullptr;     // attention_batch_workspace_floats(capacity.partial_rows, ...)
  bf16* out = nullptr;            // [q_rows, heads * head_dim]
  // [capacity.prefix_rows, 2]: the prefix_lse sequences' (natural-log m, l) per split and row
  // (AttentionBatchPlan::prefix_row); needed when capacity.prefix_rows > 0. The kernels that
  // write it are instances of their own: without it the usual ones run, untouched.
  float* prefix_ml = nullptr;
  // [capacity.prefix_score_floats]: the score_queries sequences' raw prefix scores
  // (AttentionBatchPlan::prefix_scores_at); needed when capacity.prefix_score_floats > 0.
  float* prefix_scores = nullptr;
  AttentionBatchShape shape;
  AttentionBatchCapacity capacity;  // grid sizes: >= the need of every plan it runs
};
void attention_batch(const AttentionBatchParams& p, cudaStream_t stream);
// Whether attention_batch(p) merges the splits inside the Hopper kernel instead of a combine pass:
// decided from the capacity alone (no mma.sync work items, the Hopper grid one wave of blocks
// that can wait for each other), as the single-sequence call does; same bits either way.
bool attention_batch_merges(const AttentionBatchParams& p);

// Head-averaged post-softmax attention rows of a bidirectional forward (d2Cache rollout):
// out[i * width + slot(j)] = (1 / heads) sum_h softmax_j(q_ih . k_j * scale), every key visible;
// out must be zeroed first (columns that are not key slots stay 0). Deterministic (no atomics).
// head_dim a multiple of 64 up to 256; n_keys <= attention_rows_max_keys().
struct AttentionRowsParams {
  const bf16* q = nullptr;             // [n_q, heads * head_dim] (after RoPE)
  const bf16* k_cache = nullptr;       // one layer, [capacity, kv_heads * head_dim]
  const int32_t* key_slots = nullptr;  // [n_keys] or null (key j is slot j)
  // Output column of each key ([n_keys]; null: its slot) — the sequence's logical slot when
  // key_slots are physical pool slots.
  const int32_t* column_slots = nullptr;
  int n_q = 0, n_keys = 0, heads = 0, kv_heads = 0, head_dim = 0, width = 0;
  float scale = 1.0f;
  float* out = nullptr;        // [n_q, width]
  float* workspace = nullptr;  // attention_rows_workspace_floats(n_q, n_keys, heads, kv_heads)
};
void attention_rows(const AttentionRowsParams& p, cudaStream_t stream);
size_t attention_rows_max_keys();
size_t attention_rows_workspace_floats(int n_q, int n_keys, int heads, int kv_heads);
// d2Cache's attention rollout (method-specs §4.5) from rows [layers, n, width] (attention_rows'
// output) with query r at column query_slots[r]: workspace[0, width) receives the importance of
// every column, the reverse-vector product v <- v (A_l + E)/rowsum from the last layer down.
void attention_rollout(const float* rows, const int32_t* query_slots, int layers, int n, int width,
                       float* workspace, cudaStream_t stream);
size_t attention_rollout_workspace_floats(int n, int width);

// Forwards that recompute a subset of rows (dLLM-Cache, method-specs §6.3):
// dst[rows[i], :] = src[i, :] for i < m (fp32 rows of width dim).
void scatter_rows(const float* src, const int32_t* rows, float* dst, int m, int dim,
                  cudaStream_t stream);
// x[rows[i], :] += src[i, :] for i < m.
void add_rows(const float* src, const int32_t* rows, float* x, int m, int dim, cudaStream_t stream);
// x[e] += a[e] for e < n.
void add_inplace(float* x, const float* a, int64_t n, cudaStream_t stream);
// For each of g rows: v = v_new[r] + bias (bias may be null); sim[r] = cos(v, v_cache[slots[r]])
// with torch's eps 1e-8 (double sums); then v_cache[slots[r]] = bf16(v).
void value_similarity(const float* v_new, const float* bias, bf16* v_cache, const int32_t* slots,
                      float* sim, int g, int kvd, cudaStream_t stream);

// Per-row softmax sums of fp32 logits for greedy decoding (the device half of TokenStats): the
// first maximum and its id, the second largest logit, and sum e^(l-max), sum e^(l-max) (l-max),
// sum e^(2(l-max)) — only these leave the device. The rows may be one vocabulary slice
// (ids vocab_begin.., a tensor-parallel rank's LM head): the sums of every slice merge on the
// host (row_sums_partial, then merge_vocab_shards). Banned ids (global) act as -inf; a slice
// whose every id is banned has sum_exp 0.
struct DeviceRowSums {
  int32_t argmax;  // global id
  float max_logit;
  float second_logit;
  float sum_exp;
  float sum_exp_shifted;
  float sum_exp_sq;
};
constexpr int kMaxBanned = 8;
struct BannedTokens {
  int32_t ids[kMaxBanned];
  int n = 0;
};
void greedy_row_sums(const float* logits, int rows, int vocab, int vocab_begin, BannedTokens banned,
                     DeviceRowSums* out, cudaStream_t stream);
// The same for the output rows of a whole batch in one launch: row r uses the banned list
// bans[row_ban[r]] (each kBannedInts int32: the ids, then the count) or, where row_ban[r] < 0,
// is skipped (out[r] left as it is).
constexpr int kBannedInts = kMaxBanned + 1;
void greedy_row_sums_rows(const float* logits, int rows, int vocab, int vocab_begin,
                          const int32_t* bans, const int32_t* row_ban, DeviceRowSums* out,
                          cudaStream_t stream);
// A row's sums as the slice's partial of vocab_parallel_stats.h (greedy: temperature 1, no
// confidence bans — the rows the device reduces).
VocabShardPartial row_sums_partial(const DeviceRowSums& d, int32_t vocab_begin);

// S2D2 span verification (span_verify.cu): per row, q(x) and p(x) under softmax(logits * inv_T)
// with banned ids at -inf, and the residual draw from norm((q - p)+) (q when that mass is 0) by
// inverse CDF in id order at u * Z.
struct DeviceVerifyRow {
  float q_token, p_token;
  int32_t residual_token;
};
struct SpanVerifyParams {
  const float* q_logits = nullptr;      // [rows, vocab]: the verifier's rows
  const float* kept_logits = nullptr;   // [kept, vocab]: the draft forward's rows
  const int32_t* draft_rows = nullptr;  // [rows]
  const int32_t* tokens = nullptr;      // [rows]
  const float* u = nullptr;             // [rows]
  int rows = 0, vocab = 0;
  float inv_temperature = 1.0f;
  BannedTokens banned;
  DeviceVerifyRow* out = nullptr;  // [rows]
};
void span_verify(const SpanVerifyParams& p, cudaStream_t stream);

// LLaDA2.x mixture-of-experts routing (model-specs §6.3) of n tokens, one warp per token, the
// same rule and tie-breaking as the CPU reference (backend/moe_routing.h): sigmoid scores, the
// expert bias for the selection only, the groups_per_token best groups by the sum of their two
// best biased scores, the top_k biased scores among them; weights = the chosen un-biased scores
// normalised (top_k > 1) x scaling. Limits (checked): experts <= 512, groups <= 64, top_k <= 32.
struct MoeRouteParams {
  const float* logits = nullptr;       // [n, experts] router logits (fp32)
  const float* expert_bias = nullptr;  // [experts] or null
  int32_t* experts_out = nullptr;      // [n, top_k], best first
  float* weights_out = nullptr;        // [n, top_k]
  int n = 0, experts = 0, groups = 1, groups_per_token = 1, top_k = 1;
  float scaling = 1.0f;
};
void moe_route(const MoeRouteParams& p, cudaStream_t stream);

// The grouped GEMM's rows per work item: moe_sort lists each expert's rows in tiles of this many.
constexpr int kMoeTileRows = 128;
// Ints of moe_sort's work list for `assignments` assignments over `experts` held experts and
// `extra_rows` rows of the extra expert: two counts, then at most one item per expert with rows
// plus one per full tile of rows, and the extra expert's tiles.
inline int64_t moe_work_list_ints(int64_t assignments, int experts, int64_t extra_rows = 0) {
  return 2 + std::min<int64_t>(experts, assignments) + assignments / kMoeTileRows +
         (extra_rows + kMoeTileRows - 1) / kMoeTileRows;
}

// MoE dispatch of n tokens' top_k routed experts (moe_route's experts_out): the n * top_k
// assignments (a = t * top_k + j) to the held experts first_expert .. + num_experts - 1 (all of
// them, or an expert-parallel rank's share) grouped by held expert e (id - first_expert), by token
// within an expert. With `extra` (the shared expert as one more, e = num_experts <= 1023), every
// token t first takes sorted position t for it, and the routed positions start at n.
//   offsets [num_experts + 1]: e's assignments are sorted positions offsets[e] .. offsets[e+1]
//   order [n * top_k (+ n)]: the assignment at each sorted position (t * top_k at the extra
//   expert's); position [n * top_k]: the routed positions' inverse, -1 for an assignment to an
//   expert not held (moe_combine skips those).
//   work [moe_work_list_ints(n * top_k, num_experts, extra ? n : 0)] (may be null):
//   moe_grouped_gemm's work list — work[0] the number of items, work[1] the number of held
//   routed experts with rows, then one item per (expert e, tile t of kMoeTileRows of its sorted
//   rows), e | t << 10: the extra expert's first, then in expert and tile order.
//   scratch [moe_sort_scratch_ints(n * top_k, num_experts)] (may be null): with more than
//   kMoeSortOneBlockMax assignments the sort runs over several blocks, which hand their counts
//   over through it; without it, in one block. Either way the same result.
// No host synchronisation (CUDA-graph safe); num_experts <= 1024.
void moe_sort(const int32_t* experts, int n, int top_k, int first_expert, int num_experts,
              bool extra, int32_t* offsets, int32_t* order, int32_t* position, int32_t* work,
              int32_t* scratch, cudaStream_t stream);
constexpr int kMoeSortOneBlockMax = 4096, kMoeSortBlockAssignments = 2048;
inline int64_t moe_sort_scratch_ints(int64_t assignments, int experts) {
  return (assignments + kMoeSortBlockAssignments - 1) / kMoeSortBlockAssignments * experts;
}

// Grouped GEMM over the experts, each over the rows routed to it only:
//   out[a, :] = in[row(a), :] · w[e]ᵀ for every sorted position a of expert e,
// w: bf16 [experts, n_out, k]; row(a) = order[a] / top_k (the token) when `order` is given, else
// a (inputs already in sorted order). out: fp32 or bf16 [n * top_k (+ n), n_out]; k a multiple of
// 8, in, w and extra_w 16-byte aligned; any n_out. With extra_rows > 0 (moe_sort's `extra`), the
// expert e = experts has weights extra_w [n_out, k] and the sorted positions 0 .. extra_rows - 1.
// With `swiglu`, w[e]'s rows are a gate half and an up half (n_out = 2 * inter) and out is bf16
// [.., inter]: silu(g) * u of the bf16-rounded products, the bits of a bf16 GEMM followed by
// swiglu(). Tensor cores (mma.sync bf16 -> fp32), each output element the same arithmetic
// whatever else is in the batch (batch invariant): one fp32 accumulator through the k-steps of 16
// in order.
struct MoeGemmParams {
  const bf16* in = nullptr;
  const int32_t* order = nullptr;  // null: in is in sorted order
  int top_k = 1;
  const int32_t* offsets = nullptr;  // [experts + 1], device
  const int32_t* work = nullptr;     // moe_sort's work list, device
  int assignments = 0;               // n * top_k: bounds the work list's length on the host
  const bf16* w = nullptr;
  int experts = 0, n_out = 0, k = 0;
  const bf16* extra_w = nullptr;
  int extra_rows = 0;
  void* out = nullptr;
  bool out_f32 = true;
  bool swiglu = false;
};
void moe_grouped_gemm(const MoeGemmParams& p, cudaStream_t stream);

// out[t, :] (+)= [y[t, :] +] sum_j weights[t * top_k + j] * y[position[t * top_k + j], :], j in
// order, skipping the assignments whose position is -1 (experts another rank holds); y[t, :] is
// the extra (shared) expert's row of moe_sort's `extra`.
void moe_combine(const float* y, const int32_t* position, const float* weights, int n, int top_k,
                 int hidden, bool extra, float* out, bool accumulate, cudaStream_t stream);

// The vision tower (SigLIP + the LLaVA projector, vision_kernels.cu; the encoder is
// cuda_vision_encoder.cpp).
// Unfolds crops of normalised pixels [crops, 3, side, side] into one row per patch,
// cols[crop * (side/patch)^2 + py * side/patch + px, (c * patch + ky) * patch + kx] (the
// patch-embedding convolution's weight order), so that the embedding is one GEMM.
void unfold_patches(const float* pixels, int crops, int side, int patch, bf16* cols,
                    cudaStream_t stream);
// LayerNorm with bias over rows of width dim (biased variance, fp32 math, two passes):
// out = bf16((x - mean) / sqrt(var + eps) * w + b).
void layer_norm(const float* x, const float* w, const float* b, bf16* out, int rows, int dim,
                float eps, cudaStream_t stream);
// out[r, j] = bf16(act(in[r * in_stride + j] + bias[j])) for j < cols (bias may be null).
enum class Activation : int { kNone = 0, kGeluTanh = 1, kGeluErf = 2 };
void bias_activation(const float* in, int in_stride, const float* bias, Activation act, bf16* out,
                     int rows, int cols, cudaStream_t stream);
// The same without activation into heads padded to `padded` values (the attention kernels'
// widths): out[r, h * padded + i] = bf16(in[r * in_stride + h * head_dim + i] + bias[h * head_dim
// + i]) for i < head_dim; the pad columns are left as they are (zero, set once by the caller).
void bias_to_padded_heads(const float* in, int in_stride, const float* bias, bf16* out, int rows,
                          int heads, int head_dim, int padded, cudaStream_t stream);
// x[r, :] += table[r % period, :] (a bias: period 1; position embeddings: period = patches).
void add_rows_periodic(float* x, const float* table, int rows, int dim, int period,
                       cudaStream_t stream);

// Benchmark helpers: uniform random bf16 in [-1, 1); p[i] = i.
void fill_random_bf16(bf16* data, int64_t n, uint64_t seed, cudaStream_t stream);
void fill_iota(int32_t* p, int64_t n, cudaStream_t stream);

}  // namespace dllm::cuda
