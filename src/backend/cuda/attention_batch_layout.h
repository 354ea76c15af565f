// The int32 region attention_batch_plan() stages for one batched attention call (kernels.h) and
// the arguments its kernels receive: shared by the host planner and the device code. Every offset
// is counted in int32 from the start of the region (masks: in bytes), so the region can sit
// anywhere in the caller's staging buffer; the kernels read counts and offsets from it, never from
// launch parameters, so that a captured graph replays with new plans of the same capacities.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dllm::cuda {

namespace batch_layout {
// Header: counts and where the tables start.
constexpr int kSeqCount = 0;
constexpr int kCombineRows = 1;  // query rows the combine pass merges (of sequences of several
                                 // splits: with one, the kernel writes the output itself)
constexpr int kItemCount = 2;    // + kind: work items of kernel kind (kMma, kSm90, kSm90Ws)
constexpr int kItemsAt = 5;      // + kind: their list
constexpr int kSeqsAt = 8;       // sequence descriptors, kSeqInts each
constexpr int kCombineAt = 9;    // the combine pass's rows: (query row, sequence) each
constexpr int kHeaderInts = 10;
// Kernel kinds (work lists).
constexpr int kMma = 0;   // mma.sync kernel (attention_mma.cuh)
constexpr int kSm90 = 1;  // Hopper wgmma kernel (attention_sm90.cu)
// The warp-specialised Hopper kernel (attention_ws_sm90.cu): the kSm90 tiles and
// rows per block, so a sequence's bits do not depend on which of the two runs it. It takes the
// Hopper sequences of one split and at least kSm90WsMinPromptRows rows, and split blocks of whole
// row blocks over long key ranges (attention_batch_plan.cpp), MAGE's hand-over included.
constexpr int kSm90Ws = 2;
constexpr int kKinds = 3;

// A sequence descriptor.
constexpr int kQRow = 0;     // its first row of q / out / q_positions
constexpr int kNQ = 1;       // query rows
constexpr int kNKeys = 2;    // keys: [cache entries | its queries' own keys]
constexpr int kKeysAt = 3;   // physical slot of every key (the key list resolved through the
                             // page table on the host), or -1
constexpr int kPagesAt = 4;  // page table (key j = logical slot j), or -1: key j is slot j
constexpr int kKind = 5;     // MaskKind
constexpr int kBlockSize = 6;
constexpr int kMaskAt = 7;  // byte offset of the custom mask, or -1
constexpr int kMaskQueriesOnly = 8;
constexpr int kSplits = 9;
constexpr int kPartialRow = 10;  // its first row of the split partials
// With a key list: ints between the lists of consecutive KV heads (0: one list for every head).
// Sparse attention's gathered keys differ per KV head (AttentionBatchSeq::device_keys).
constexpr int kKeysHeadStride = 11;
// Its first row of prefix-only (m, l) in AttentionBatchKernelArgs::prefix_ml, or -1
// (AttentionBatchSeq::prefix_lse).
constexpr int kPrefixRow = 12;
constexpr int kKeysAtPositions = 13;  // AttentionBatchSeq::keys_at_positions
// AttentionBatchSeq::score_queries: where its n_q ints sit that give each query's index among
// them (or -1), or -1; how many there are; its first float in
// AttentionBatchKernelArgs::prefix_scores.
constexpr int kScoreMapAt = 14;
constexpr int kScoreQueries = 15;
constexpr int kScoresAt = 16;
constexpr int kSeqInts = 17;
// The most raw-score rows (score_queries x the G query heads) a sequence hands over per KV head:
// one block of the score sums holds their lse (mage_score_sum_from_scores).
constexpr int kMaxHandedScoreRows = 16;
// A row of raw prefix scores: the prefix's keys, padded to whole 16 bytes (the kernels store key
// pairs as 8 bytes, the score sums load 4 keys at once).
__host__ __device__ constexpr int64_t prefix_score_stride(int64_t n_prefix) {
  return (n_prefix + 3) / 4 * 4;
}

// A work item: one block per KV head of (sequence, row block, splits). It carries a copy of its
// sequence's descriptor, so that a block finds everything one load after the header.
constexpr int kItemSeq = 0;
constexpr int kItemRowBlock = 1;
constexpr int kItemSplit = 2;      // its (first) split, or kSerialSplit
constexpr int kItemPair = 3;       // Hopper items: the number of its (sequence, row block) pair
constexpr int kItemSplitLast = 4;  // its last split: > kItemSplit for a split group
constexpr int kItemDesc = 5;       // kSeqInts: the sequence descriptor
constexpr int kItemInts = kItemDesc + kSeqInts;
static_assert(kItemInts <= 32, "load_seq_view() reads an item with one int per lane");

// A work item's split that stands for all of its sequence's splits, computed one after the other
// by one block (attention_seq.cuh: SplitSpan) and merged by it (attention_serial_merge.cuh): the
// same partials, merged with the same arithmetic as the combine pass, so the same bits as one
// block per split. The planner takes it where a batch fills the GPU anyway: no combine pass, one
// block prologue and Q load per sequence instead of per split, and a pipeline that runs on from
// one split into the next.
constexpr int kSerialSplit = -1;
// Splits a serial item may have (its merge holds one weight per split in registers).
constexpr int kMaxSerialSplits = 16;
// A split group (mma.sync items only): one block computes splits kItemSplit .. kItemSplitLast of
// its sequence in turn, as a serial item does, and leaves them to the combine pass like split
// blocks — the same partials, so the same bits. The planner takes groups to trade the blocks'
// fixed costs against wave quantisation where serial items would leave the GPU's tail idle.

// The batch workspace starts with the in-kernel merge's counters, two per (pair, KV head).
constexpr int kMergeCounters = 2048;

// Splits one batched sequence may have (the combine pass's weights sit in static shared memory).
constexpr int kMaxSplits = 256;
// Rows per block and keys per tile of the two kernels in batched calls. One configuration per
// kernel for every sequence: a row's arithmetic depends on the tile size only (not on how many
// rows share a block), so a sequence's result cannot depend on the batch it is in. One-warp
// blocks for the mma.sync kernel: its main case is a 4-query block at GQA 4 (16 rows), and
// more, smaller blocks keep more loads in flight; wider sequences take several row blocks, which
// read the same keys side by side (through L2).
constexpr int kMmaWarps = 1;
constexpr int kMmaTileKeys = 32;
constexpr int kSm90Rows = 128;
constexpr int kSm90TileKeys = 64;
// Rows per KV head from which a one-split Hopper sequence (a prompt) goes to the warp-specialised
// kernel: four row blocks, a prompt of 128 queries at GQA 4. Shorter one-split sequences (a
// denoising block over a short cache) stay with the split kernel, whose step times are the
// measured ones; the threshold itself is not tuned.
constexpr int kSm90WsMinPromptRows = 4 * kSm90Rows;
}  // namespace batch_layout

// Pages of the pool are a power of two of slots, 2^shift: logical slot j of a sequence lives at
// physical slot paged_slot(its page table, j, shift) — page table[j >> shift], offset j's low bits.
// `first_page`: the table holds the pages from that one on (a block's staged part of it).
__host__ __device__ inline int32_t paged_slot(const int32_t* table, int j, int shift,
                                              int first_page = 0) {
  return (table[(j >> shift) - first_page] << shift) | (j & ((1 << shift) - 1));
}
// The shift of pages of `page_size` slots (a power of two).
constexpr int page_shift_of(int page_size) {
  int shift = 0;
  while ((1 << shift) < page_size) ++shift;
  return shift;
}

// What the batched kernels receive (by value).
struct AttentionBatchKernelArgs {
  const __nv_bfloat16* q = nullptr;
  const __nv_bfloat16* k_pool = nullptr;
  const __nv_bfloat16* v_pool = nullptr;
  const int32_t* slot_positions = nullptr;
  const int32_t* q_positions = nullptr;
  const int32_t* plan = nullptr;  // the device copy of the planner's region
  __nv_bfloat16* partial_o = nullptr;
  float* partial_ml = nullptr;
  __nv_bfloat16* out = nullptr;
  float* prefix_ml = nullptr;      // the prefix_lse sequences' (m, l) rows, or null
  float* prefix_scores = nullptr;  // the score_queries sequences' raw prefix scores, or null
  int32_t* counters = nullptr;     // kMergeCounters, zero between calls
  int heads = 0, kv_heads = 0, head_dim = 0, page_shift = 0;
  float scale = 1.0f;
  // Grid order: (KV heads, items) — the KV heads of an item side by side — where set, else
  // (items, KV heads). attention_batch.cu says why.
  bool heads_inner = false;
  bool ws_block_causal = false;  // AttentionBatchCapacity::ws_block_causal
};

}  // namespace dllm::cuda
