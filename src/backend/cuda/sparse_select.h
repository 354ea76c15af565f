// Sparse attention on the GPU (method-specs §1.6): MAGE's selection — the prefix-only
// log-sum-exp of the block's queries, the score sums, a top-k per KV head — and the key lists
// of the gathered attention, which then runs in the batched flash kernels
// (AttentionBatchSeq::device_keys). The kernels are checked against the CPU reference
// (backend/cpu/sparse_select.h) in tests/cuda/cuda_sparse_select_test.cpp; the forward's glue is
// cuda_sparse.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention_batch_layout.h"
#include "backend/cuda/kernels.h"

namespace dllm::cuda {

using bf16 = __nv_bfloat16;

// The most rows (selection query rows x the G query heads of a KV head) a selection takes: one
// score-sum block holds them all, 16 warps of 16.
constexpr int kMaxSelectionRows = 256;

// A sequence's prefix keys through its page table: key j sits in slot paged_slot(pages, j,
// shift). The forward stages the table — a page an int — instead of a slot a key (32K keys: 8 KB
// instead of 128 KB a step, and no host loop over the keys).
struct PrefixPages {
  const int32_t* pages = nullptr;
  int shift = 0;
};
#ifdef __CUDACC__
__device__ __forceinline__ int32_t prefix_slot(const PrefixPages& p, int j) {
  return paged_slot(p.pages, j, p.shift);
}
#endif

// MAGE's score-sum (§1.6 step 2): for every KV head h and prefix key j,
//   scores[h, j] = mean over the used rows r and the G query heads g of h of
//                  exp(q[r, g] . k[j] * scale - lse[r, g])
// where lse is each row's natural-log log-sum-exp of its scaled scores over the prefix keys
// only. The forward takes it from the exact pass's hand-over (§1.6 step 1:
// mage_prefix_lse_from_attention()); mage_prefix_lse() computes it with a pass over K of its own
// (the reference of the hand-over, and the path of layers the batch re-plans: dLLM-Cache).
struct ScoreSumParams {
  const bf16* q = nullptr;             // [rows, heads * head_dim], after RoPE
  const float* lse = nullptr;          // [rows, heads]
  const bf16* k_cache = nullptr;       // one layer of the pool: [slots, kv_heads * head_dim]
  PrefixPages prefix;                  // the slot of each of the n_prefix prefix keys
  const int32_t* rows_used = nullptr;  // [n_rows_used]: the block rows averaged over
  float* scores = nullptr;             // [kv_heads, n_prefix]
  int n_rows_used = 0, n_prefix = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  // mage_score_sum: query rows per warp, 16 or 32 (head_dim <= 128). A warp of 32 rows loads
  // each key fragment once for two MMAs: half the shared-memory reads and shuffles per key,
  // which bounded the kernel at ~1.2 TB/s with 16 (H100, SDAR-8B shape, 32K).
  int rows_per_warp = 32;
  // mage_score_sum: prefix keys per block, a multiple of 64 up to 1024 — the same sums whatever
  // the split (a key's rows are summed within one block) — or 0: 256 where a block is one warp
  // (up to 32 rows), else 1024. H200, SDAR-8B, one sequence at 32K, the 34 layers' sums on the
  // main stream: 128 rows (all of a block of 32) 1024 keys 1.81 ms, 512 1.63, 256 1.82 (and 1024
  // the fastest beside the main stream: step 1 at 128K 18.9 ms vs 19.3 with 512); 4 or 16 rows
  // (--sparse-select-queries 1 or 4) 1024 keys 2.66 ms, 256 1.49–1.51, 128 1.54–1.64.
  int block_keys = 0;
};
void mage_score_sum(const ScoreSumParams& p, cudaStream_t stream);

// The same sums from the exact pass's raw prefix scores of the used rows (AttentionBatchSeq::
// score_queries = rows_used) instead of a pass over K: a few rows' scores are fewer bytes than
// the keys (4 rows: 16 B a key and KV head, twice — written, read — against K's 256 at head_dim
// 128). The rows' lse: merged here from the attention's hand-over as
// mage_prefix_lse_from_attention() merges it (the same bits), or with prefix_ml null read from
// p.lse (SparseD's, folded first). p.q, k_cache and prefix are unused. At most
// batch_layout::kMaxHandedScoreRows rows.
struct HandedScores {
  const float* raw = nullptr;        // [kv_heads][n_rows_used x G][stride], unscaled
  int64_t stride = 0;                // batch_layout::prefix_score_stride(the attention's prefix)
  const float* prefix_ml = nullptr;  // the sequence's first (m, l) row of the hand-over, or null
  int splits = 0, n_q = 0;           // its splits and query rows (with prefix_ml)
  // prefix_ml holds the used rows' (m, l) alone ([splits][kv_heads][n_rows_used x G]: from
  // mage_prefix_ml_from_scores), not every query row's as the attention's hand-over does.
  bool ml_of_used_rows = false;
};
void mage_score_sum_from_scores(const ScoreSumParams& p, const HandedScores& hs,
                                cudaStream_t stream);

// The used rows' prefix-only (m, l) from their raw scores (hs.raw, hs.stride) in chunks of
// kPrefixMlChunkKeys keys: ml [chunks][kv_heads][n_rows_used x G] pairs, (natural-log m, l) as
// the attention's hand-over writes them, merged by mage_score_sum_from_scores with splits =
// chunks and ml_of_used_rows. Why: the attention computing them too cost its warp-specialised
// kernel ~12 % a decoding launch — the code in its tile loop, though it runs at one tile a split
// (docs/benchmarks.md, 2026-12-01) —, while these are a read of the scores the sums read anyway.
constexpr int kPrefixMlChunkKeys = 2048;
int prefix_ml_chunks(int n_prefix);
size_t prefix_ml_from_scores_floats(int n_prefix, int n_rows_used, int heads);
void mage_prefix_ml_from_scores(const ScoreSumParams& p, const HandedScores& hs, float* ml,
                                cudaStream_t stream);

// Top-k per KV head (§1.6 step 3): out[h, 0..k) = the indices of the k largest scores[h, :]
// (ties to the lower index, as top_k_indices), ascending. A radix select over the scores' bits
// spread over chunks of 4096 scores, one block each (a single block per KV head left the
// selection latency-bound: ~45 µs a layer at 32K): three histogram passes of 11, 11 and 10 bits,
// each finished by its last block, which picks the bin holding the k-th largest; a count pass
// whose last block turns the chunks' counts into output offsets; an ordered compaction pass.
// workspace: top_k_workspace_ints(n, kv_heads) ints (cleared here). Needs 0 < k < n.
size_t top_k_workspace_ints(int n, int kv_heads);
void sparse_top_k(const float* scores, int n, int k, int kv_heads, int32_t* out, int32_t* workspace,
                  cudaStream_t stream);

// The prefix-only log-sum-exp the score sums need (§1.5: each row's softmax over the prefix keys
// only): lse[r, head] = log sum_j exp(q[r, head] . k[j] * scale) over the prefix keys j, for the
// used rows r (other rows are left alone). One pass over the prefix's K in blocks of keys, then a
// merge of the blocks' (max, sum). workspace: prefix_lse_workspace_floats() floats. The fields
// are ScoreSumParams' (lse and scores unused).
//
// Both passes run on the tensor cores (the flash kernels' mma.sync fragments), one warp per 16
// of the R = used rows x G rows of a KV head: R <= 256 (a 32-query block at GQA 8), head_dim 16,
// 32, 64, 128 or 256; a clear error otherwise.
size_t prefix_lse_workspace_floats(int n_prefix, int n_rows_used, int heads, int kv_heads);
void mage_prefix_lse(const ScoreSumParams& p, float* lse, float* workspace, cudaStream_t stream);

// The same lse from the exact attention's hand-over (§1.6 step 1): the batched attention of a
// sequence with AttentionBatchSeq::prefix_lse wrote the (natural-log m, l) of its `splits` key
// splits over the prefix keys for its n_q query rows (prefix_ml: its AttentionBatchPlan::
// prefix_row); merged here per used row as the combine pass merges outputs (the fields are
// ScoreSumParams': rows_used, heads, kv_heads, n_rows_used). No pass over K.
void mage_prefix_lse_from_attention(const ScoreSumParams& p, const float* prefix_ml, int splits,
                                    int n_q, float* lse, cudaStream_t stream);

// SparseD's softmax runs over every key a row sees (§6.2), not the prefix alone: folds the
// block's own keys into the prefix-only lse of the used rows,
//   lse[r, head] = log(exp(lse[r, head]) + sum over the block keys t row r sees of
//                  exp(q[r, head] . k_t * scale)),
// key t being query row t's own (physical slot slots[t], position positions[t]); the rows see
// keys by the forward's mask (causal, bidirectional or block-causal of block_size).
struct BlockKeys {
  const int32_t* slots = nullptr;      // [n]
  const int32_t* positions = nullptr;  // [n]
  int n = 0;
  MaskKind kind = MaskKind::kBlockCausal;
  int block_size = 0;
};
void fold_block_keys_lse(const ScoreSumParams& p, const BlockKeys& b, float* lse,
                         cudaStream_t stream);

// Quest with MAGE's per-block averaging (method-specs §6.1; the CPU's quest_page_scores): for
// KV head h and page t of page_size prefix keys (the last page may be partial: its keys alone),
//   scores[h, t] = mean over the rows r and the G query heads g of h of
//                  sum_d max(q_d * max_d, q_d * min_d)   (max_d, min_d over the page's keys)
// = (sum_d max_d * P_d + min_d * N_d) / (rows * G), P_d / N_d the sums of the positive /
// negative q_d over the rows and heads (max >= min). One kernel sums P and N per KV head, one
// warp a page takes the page's bounds from K and its score. signs: 2 * kv_heads * head_dim
// floats of scratch.
struct QuestParams {
  const bf16* q = nullptr;        // [n_rows, heads * head_dim], after RoPE
  const bf16* k_cache = nullptr;  // one layer of the pool: [slots, kv_heads * head_dim]
  PrefixPages prefix;             // the slot of each of the n_prefix prefix keys
  float* signs = nullptr;         // scratch: [kv_heads, 2, head_dim]
  float* scores = nullptr;        // [kv_heads, quest_pages(n_prefix, page_size)]
  int n_rows = 0, n_prefix = 0, page_size = 16, heads = 0, kv_heads = 0, head_dim = 0;
};
void quest_page_scores(const QuestParams& p, cudaStream_t stream);
// Pages of `n_prefix` keys, the last one possibly partial.
inline int quest_pages(int n_prefix, int page_size) {
  return (n_prefix + page_size - 1) / page_size;
}

// A Quest set's slots from its pages: slots[i, t * page_size + u] = pages[i, t] * page_size + u
// for the n_sets sets of n_pages ascending pages each (ascending slots out; a partial last
// page's slots past the prefix too, which the key lists mask and the results drop).
void quest_expand_pages(const int32_t* pages, int n_sets, int n_pages, int page_size,
                        int32_t* slots, cudaStream_t stream);

// The gathered attention's key lists for one layer (AttentionBatchSeq::device_keys), for every
// sequence attending through stored sets: KV head h of a sequence reads the physical slots of
//   [its k selected prefix slots (ascending) | the slots committed since: sel_prefix .. |
//    its queries' own fresh slots]
// (Quest's sets hold k / page pages, each standing for its page's slots)
// — the logical slots j - k + sel_prefix past the first k, which is where the cache holds them.
// table: kSparseKeysInts ints per sequence (below); `staging`: the device staging the offsets
// count from. Sequences whose first sparse layer is past `layer` are skipped.
namespace sparse_keys {
constexpr int kSetsLo = 0;  // device address of the sets: int32 [layers, kv_heads, k]
constexpr int kSetsHi = 1;
constexpr int kK = 2;           // selected slots per KV head
constexpr int kSelPrefix = 3;   // the prefix the sets were selected from
constexpr int kNKeys = 4;       // keys per KV head (k + committed since + queries)
constexpr int kKeysAt = 5;      // where the kv_heads lists go, int32 from `staging`
constexpr int kPagesAt = 6;     // its page table, int32 from `staging`
constexpr int kFirstLayer = 7;  // its first sparse layer
constexpr int kSetPage = 8;     // slots per set entry: 1, or Quest's page size (sets of pages)
constexpr int kInts = 9;
}  // namespace sparse_keys
// `masked_slot`: the physical slot a list holds where a set's entry lies past its prefix (a
// partial last page of Quest): its position is past every query, so the block-causal rule
// masks it (CudaBackend::masked_slot; Quest checks the rule).
void sparse_gather_keys(int32_t* staging, const int32_t* table, int n_seqs, int kv_heads, int layer,
                        int page_shift, int masked_slot, cudaStream_t stream);

}  // namespace dllm::cuda
