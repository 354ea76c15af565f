// The host half of batched paged attention (kernels.h): a sequence's split count, and the plan
// region (attention_batch_layout.h) the kernels read.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/attention_batch_layout.h"
#include "backend/cuda/attention_dispatch.h"
#include "backend/cuda/attention_sm90.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace dllm::cuda {

namespace {

namespace L = batch_layout;

int rows_per_kv_head(int n_q, const AttentionBatchShape& s) {
  return n_q * (s.heads / s.kv_heads);
}

bool takes_sm90(int n_q, const AttentionBatchShape& s) {
  return attention_use_sm90(s.head_dim, rows_per_kv_head(n_q, s));
}

int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e && std::atoi(e) >= 0 && *e ? std::atoi(e) : fallback;
}

// The split rule's knobs (attention_batch_splits()); the environment overrides them for tuning
// experiments only.
// 3 keys per row: a lone 32-query block over 4K keys 27.0 -> 25.0 µs against 4, 128 such blocks
// 1398 -> 1475 µs (docs/benchmarks.md, 2026-11-25).
int keys_per_row() {
  static const int v = std::max(env_int("DLLM_ATTN_BATCH_KEYS_PER_ROW", 3), 1);
  return v;
}
int min_tiles() {
  static const int v = std::max(env_int("DLLM_ATTN_BATCH_MIN_TILES", 4), 1);
  return v;
}

int resident_blocks(int kind, const AttentionBatchShape& s) {
#ifdef DLLM_HAVE_SM90A
  if (kind == L::kSm90) return sm90_attention_batch_resident_blocks();
#endif
  (void)kind;
  return attention_batch_mma_resident_blocks(s.head_dim);
}

#ifdef DLLM_HAVE_SM90A
// Keys a split needs before its blocks go to the warp-specialised kernel; the environment
// overrides it for tuning experiments only.
int ws_min_split_keys() {
  static const int v = env_int("DLLM_ATTN_WS_MIN_SPLIT_KEYS", 1024);
  return v;
}
// Blocks an SM of the warp-specialised kernel that its split count fills (it holds one).
int ws_resident_blocks() {
  static const int v = std::max(env_int("DLLM_ATTN_WS_RESIDENT", 1), 1);
  return v;
}
// Whether a Hopper sequence's `splits` (> 1) split blocks go to the warp-specialised kernel:
// whole row blocks, each split long enough.
bool ws_takes_split_blocks(int rows, int64_t n_keys, int splits) {
  return rows >= L::kSm90Rows && splits > 1 && sm90_ws_attention_enabled() &&
         (n_keys + splits - 1) / splits >= ws_min_split_keys();
}
#endif

// Whether a sequence's items go to the warp-specialised kernel (batch_layout::kSm90Ws)
// instead of the Hopper split kernel: same tiles, same bits, faster over long key ranges — a long
// prompt of one split, or a denoising block's split blocks over a long cache (never a serial item:
// the caller asks only for split blocks). A function of the sequence's own shape, as its splits
// are.
bool takes_sm90_ws(const AttentionBatchSeq& q, int kind, int splits, const AttentionBatchShape& s) {
#ifdef DLLM_HAVE_SM90A
  if (kind != L::kSm90) return false;
  const int rows = rows_per_kv_head(q.n_q, s);
  if (splits == 1) return rows >= L::kSm90WsMinPromptRows && sm90_ws_attention_enabled();
  return ws_takes_split_blocks(rows, q.n_keys, splits);
#else
  (void)q, (void)kind, (void)splits, (void)s;
  return false;
#endif
}
// MAGE's hand-over (prefix-only (m, l) or raw scores) is written by split blocks, one a split.
bool hands_over(const AttentionBatchSeq& q) {
  return q.prefix_lse || !q.score_queries.empty();
}
bool may_run_serial(const AttentionBatchSeq& q, int splits) {
  return q.n_q > 0 && splits > 1 && splits <= L::kMaxSerialSplits && !hands_over(q);
}

// Split groups: the mma.sync kernel's items only (the Hopper kernel may merge its splits in the
// kernel, one block per split), never a sequence that hands over.
bool may_group(const AttentionBatchSeq& q, int kind) {
  return kind == L::kMma && !hands_over(q);
}

// kAuto's splits per split group (1: split blocks). DLLM_ATTN_BATCH_GROUP=G forces G (tuning
// experiments). One since the mma.sync kernel's loads became cheap (2026-11-29, H200, SDAR-4B
// shape, block 4): groups of 1 / 2 / 4 / 8 give 176 / 178 / 181 / 195 µs for 128 sequences over
// 1K keys and 629 / 630 / 630 / 630 over 4K, and a pair costs 32 sequences over 1K 53 -> 56 µs
// (pairs gained 8 % at 128 x 1K while the loads' issue dominated a tile).
int auto_split_group() {
  static const int forced = env_int("DLLM_ATTN_BATCH_GROUP", 0);
  return forced > 0 ? forced : 1;
}

// kAuto's choice per kernel kind (attention_batch_plan()): serial items where their blocks fill
// the GPU serial_waves() times. Fewer, and the blocks of one split each balance better: a serial
// grid of 1.3 waves (128 sequences of 4 queries at GQA 4: 1024 one-warp blocks, 792 resident)
// leaves most SMs idle while its last 0.3 runs.
double serial_waves() {
  static const double v = [] {
    const char* e = std::getenv("DLLM_ATTN_BATCH_SERIAL_WAVES");
    return e && *e ? std::max(std::atof(e), 0.0) : 1.5;
  }();
  return v;
}
AttentionBatchSplitMode forced_mode() {
  static const AttentionBatchSplitMode v = [] {
    const char* e = std::getenv("DLLM_ATTN_BATCH_SERIAL");
    const std::string m = e ? e : "";
    return m == "on"    ? AttentionBatchSplitMode::kSerial
           : m == "off" ? AttentionBatchSplitMode::kParallel
                        : AttentionBatchSplitMode::kAuto;
  }();
  return v;
}

void check_shape(const AttentionBatchShape& s) {
  if (s.heads <= 0 || s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    fail("attention_batch: heads ", s.heads, " not a positive multiple of kv heads ", s.kv_heads);
  if (s.head_dim != 16 && s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128)
    fail("attention_batch: head_dim must be 16, 32, 64 or 128 (got ", s.head_dim, ")");
  if (s.page_size < 8 || s.page_size > 256 || (s.page_size & (s.page_size - 1)) != 0)
    fail("attention_batch: page_size must be a power of two from 8 to 256 (got ", s.page_size, ")");
  if (s.pool_slots <= 0 || s.pool_slots > INT32_MAX)
    fail("attention_batch: pool_slots must be in [1, 2^31) (got ", s.pool_slots, ")");
}

// The physical slot of logical slot `slot` of sequence `i` (checked against the pool).
int32_t physical_slot(const AttentionBatchSeq& q, const AttentionBatchShape& s, int64_t slot,
                      size_t i) {
  if (slot < 0) fail("attention_batch: sequence ", i, " has a negative key slot ", slot);
  int64_t phys = slot;
  if (!q.page_table.empty()) {
    const int64_t page = slot / s.page_size;
    if (page >= static_cast<int64_t>(q.page_table.size()))
      fail("attention_batch: sequence ", i, ": slot ", slot, " is past its page table (",
           q.page_table.size(), " pages)");
    phys = static_cast<int64_t>(q.page_table[page]) * s.page_size + slot % s.page_size;
  }
  if (phys < 0 || phys >= s.pool_slots)
    fail("attention_batch: sequence ", i, ": slot ", slot, " maps to physical slot ", phys,
         ", outside the pool of ", s.pool_slots);
  return static_cast<int32_t>(phys);
}

void check_sequence(const AttentionBatchSeq& q, size_t i) {
  if (q.n_q < 0 || q.n_keys < q.n_q)
    fail("attention_batch: sequence ", i, " has ", q.n_q, " queries and ", q.n_keys,
         " keys (keys include the queries)");
  if (!q.key_slots.empty() && q.key_slots.size() != static_cast<size_t>(q.n_keys))
    fail("attention_batch: sequence ", i, " has ", q.key_slots.size(), " key slots for ", q.n_keys,
         " keys");
  if (q.device_keys &&
      (!q.key_slots.empty() || (q.kind == MaskKind::kCustom && !q.custom_mask_queries_only)))
    fail("attention_batch: sequence ", i,
         " reads per-head device key lists, which combine with neither a key list nor a full "
         "custom mask");
  if (q.kind == MaskKind::kBlockCausal && q.block_size <= 0)
    fail("attention_batch: sequence ", i, " is block-causal without a block size");
  for (size_t t = 0; t < q.score_queries.size(); ++t)
    if (q.score_queries[t] < 0 || q.score_queries[t] >= q.n_q ||
        (t > 0 && q.score_queries[t] <= q.score_queries[t - 1]))
      fail("attention_batch: sequence ", i, ": score_queries must ascend within [0, ", q.n_q,
           ") (entry ", t, " is ", q.score_queries[t], ")");
  if (q.kind == MaskKind::kCustom) {
    const size_t want = static_cast<size_t>(q.n_q) *
                        (q.custom_mask_queries_only ? q.n_q : static_cast<size_t>(q.n_keys));
    if (q.custom_mask.size() != want)
      fail("attention_batch: sequence ", i, " has a custom mask of ", q.custom_mask.size(),
           " entries (want ", want, ")");
  }
}

// Appends the sequence's key addressing to the region and sets its descriptor's offsets: a key
// list is resolved to physical slots here (one load per key on the device); a plain range keeps
// its page table (one load per key row, mostly from L1).
void stage_keys(const AttentionBatchSeq& q, const AttentionBatchShape& s, size_t i,
                std::vector<int32_t>& st, size_t base, size_t desc) {
  st[desc + L::kKeysAt] = -1;
  st[desc + L::kPagesAt] = -1;
  st[desc + L::kKeysHeadStride] = 0;
  if (q.device_keys) {  // reserved: filled on the device (AttentionBatchSeq::device_keys)
    st[desc + L::kKeysAt] = static_cast<int32_t>(st.size() - base);
    st[desc + L::kKeysHeadStride] = q.n_keys;
    st.resize(st.size() + static_cast<size_t>(s.kv_heads) * q.n_keys, 0);
  } else if (!q.key_slots.empty()) {
    st[desc + L::kKeysAt] = static_cast<int32_t>(st.size() - base);
    for (int32_t slot : q.key_slots) st.push_back(physical_slot(q, s, slot, i));
  } else if (!q.page_table.empty()) {
    if (q.n_keys > 0) physical_slot(q, s, q.n_keys - 1, i);  // checks the table's length
    const size_t pages = (static_cast<size_t>(q.n_keys) + s.page_size - 1) / s.page_size;
    st[desc + L::kPagesAt] = static_cast<int32_t>(st.size() - base);
    for (size_t pg = 0; pg < pages; ++pg) {
      if (q.page_table[pg] < 0 || (q.page_table[pg] + 1) * int64_t{s.page_size} > s.pool_slots)
        fail("attention_batch: sequence ", i, ": page ", pg, " maps to physical page ",
             q.page_table[pg], ", outside the pool");
      st.push_back(q.page_table[pg]);
    }
  } else if (q.n_keys > 0) {
    physical_slot(q, s, q.n_keys - 1, i);
  }
}

// Appends the custom mask's bytes (padded to whole int32s); its byte offset goes to the
// descriptor.
void stage_mask(const AttentionBatchSeq& q, std::vector<int32_t>& st, size_t base, size_t desc) {
  st[desc + L::kMaskAt] = -1;
  st[desc + L::kMaskQueriesOnly] = q.custom_mask_queries_only ? 1 : 0;
  if (q.kind != MaskKind::kCustom || q.custom_mask.empty()) return;
  const size_t at = st.size();
  st.resize(at + (q.custom_mask.size() + 3) / 4, 0);
  std::copy(q.custom_mask.begin(), q.custom_mask.end(), reinterpret_cast<uint8_t*>(&st[at]));
  st[desc + L::kMaskAt] = static_cast<int32_t>((at - base) * 4);
}

// Appends the map from each query to its index among score_queries (or -1) and sets the
// descriptor's score fields; returns the floats of raw prefix scores it takes.
int64_t stage_score_map(const AttentionBatchSeq& q, const AttentionBatchShape& s,
                        std::vector<int32_t>& st, size_t base, size_t desc, int64_t scores_at) {
  st[desc + L::kScoreMapAt] = -1;
  st[desc + L::kScoreQueries] = 0;
  st[desc + L::kScoresAt] = 0;
  if (q.score_queries.empty()) return 0;
  const size_t at = st.size();
  st.resize(at + static_cast<size_t>(q.n_q), -1);
  for (size_t t = 0; t < q.score_queries.size(); ++t)
    st[at + static_cast<size_t>(q.score_queries[t])] = static_cast<int32_t>(t);
  st[desc + L::kScoreMapAt] = static_cast<int32_t>(at - base);
  st[desc + L::kScoreQueries] = static_cast<int32_t>(q.score_queries.size());
  st[desc + L::kScoresAt] = static_cast<int32_t>(scores_at);
  return static_cast<int64_t>(q.score_queries.size()) * s.heads *
         L::prefix_score_stride(q.n_keys - q.n_q);
}

}  // namespace

int attention_batch_splits(int n_q, int n_keys, const AttentionBatchShape& s) {
  const int R = rows_per_kv_head(n_q, s);
  const bool sm90 = takes_sm90(n_q, s);
  const int rows_per_block = sm90 ? L::kSm90Rows : L::kMmaWarps * 16;
  const int tile_keys = sm90 ? L::kSm90TileKeys : L::kMmaTileKeys;
  const int64_t blocks =
      static_cast<int64_t>((R + rows_per_block - 1) / rows_per_block) * s.kv_heads;
  // As attention_splits(): splits of >= 4 tiles, no more blocks than one wave of `resident` blocks
  // an SM holds — now also >= keys_per_row() keys per row, since a big batch pays every split's
  // partials.
  auto splits_for = [&](int resident) {
    const int64_t split_keys =
        std::max<int64_t>(int64_t{min_tiles()} * tile_keys, int64_t{keys_per_row()} * R);
    const int64_t by_keys = (n_keys + split_keys - 1) / split_keys;
    const int64_t by_wave =
        static_cast<int64_t>(resident) * device_sm_count() / std::max<int64_t>(blocks, 1);
    int64_t splits = std::clamp<int64_t>(std::min(by_keys, by_wave), 1, L::kMaxSplits);
    // The kernels share the keys out in whole tiles (split_keys() of attention_seq.cuh): drop the
    // splits that rounding would leave without keys (they cost a block and a partial each).
    for (int i = 0; i < 4; ++i) {
      const int64_t chunk =
          ((n_keys + splits - 1) / splits + tile_keys - 1) / tile_keys * tile_keys;
      const int64_t used = std::max<int64_t>((n_keys + chunk - 1) / chunk, 1);
      if (used == splits) break;
      splits = used;
    }
    return static_cast<int>(splits);
  };
#ifdef DLLM_HAVE_SM90A
  // Split blocks long enough for the warp-specialised kernel fill one wave of it (one block an
  // SM: two waves were slower, 1 x 128K keys 185.5 -> 192.5 µs); the split kernel holds two.
  if (sm90) {
    const int ws = splits_for(ws_resident_blocks());
    if (ws_takes_split_blocks(R, n_keys, ws)) return ws;
  }
  return splits_for(sm90 ? sm90_attention_batch_resident_blocks()
                         : attention_batch_mma_resident_blocks(s.head_dim));
#else
  return splits_for(attention_batch_mma_resident_blocks(s.head_dim));
#endif
}

AttentionBatchPlan attention_batch_plan(std::span<const AttentionBatchSeq> seqs,
                                        const AttentionBatchShape& shape, std::vector<int32_t>& st,
                                        AttentionBatchSplitMode mode, int split_group) {
  check_shape(shape);
  AttentionBatchPlan plan;
  plan.offset = st.size();
  const size_t base = plan.offset;
  const size_t n = seqs.size();
  st.resize(base + L::kHeaderInts + n * L::kSeqInts, 0);
  st[base + L::kSeqCount] = static_cast<int32_t>(n);
  st[base + L::kSeqsAt] = L::kHeaderInts;
  // Each sequence's splits, kernel kind and row blocks; then which kinds run serial items.
  std::vector<int> kinds(n), row_blocks(n);
  int64_t serial_blocks[2] = {0, 0};
  for (size_t i = 0; i < n; ++i) {
    const AttentionBatchSeq& q = seqs[i];
    check_sequence(q, i);
    const int64_t score_rows =
        static_cast<int64_t>(q.score_queries.size()) * (shape.heads / shape.kv_heads);
    if (score_rows > L::kMaxHandedScoreRows)
      fail("attention_batch: sequence ", i, " hands over ", q.score_queries.size(),
           " score queries x ", shape.heads / shape.kv_heads, " query heads = ", score_rows,
           " score rows per KV head; at most ", L::kMaxHandedScoreRows);
    const bool attended = q.n_q > 0 && !q.attended_elsewhere;  // else: the sparse prefill kernel's
    const int splits = attended ? attention_batch_splits(q.n_q, q.n_keys, shape) : 1;
    plan.splits.push_back(splits);
    kinds[i] = takes_sm90(q.n_q, shape) ? L::kSm90 : L::kMma;
    const int rows_per_block = kinds[i] == L::kSm90 ? L::kSm90Rows : L::kMmaWarps * 16;
    row_blocks[i] = (rows_per_kv_head(q.n_q, shape) + rows_per_block - 1) / rows_per_block;
    if (attended) {
      const int64_t blocks = int64_t{row_blocks[i]} * shape.kv_heads;
      serial_blocks[kinds[i]] += blocks * (may_run_serial(q, splits) || splits == 1 ? 1 : splits);
    }
  }
  if (mode == AttentionBatchSplitMode::kAuto) mode = forced_mode();
  bool serial_kind[2];
  for (int kind : {L::kMma, L::kSm90})
    serial_kind[kind] = mode == AttentionBatchSplitMode::kSerial ||
                        (mode == AttentionBatchSplitMode::kAuto && serial_blocks[kind] > 0 &&
                         static_cast<double>(serial_blocks[kind]) >=
                             serial_waves() * resident_blocks(kind, shape) * device_sm_count());
  const int group = split_group > 0 ? split_group
                    : serial_kind[L::kMma] || mode == AttentionBatchSplitMode::kParallel
                        ? 1
                        : auto_split_group();

  // Work items: a serial item's sequence first, longest first (they are the long blocks: started
  // early, they leave the short ones to fill the tail), then the split blocks.
  // Items are appended to flat int lists as they are made (no allocation per item: this is
  // every GPU forward's host path); serial items are sorted by an index over theirs.
  struct SerialItem {
    int64_t keys;
    size_t at;  // its first int in serial_ints[kind]
  };
  std::vector<SerialItem> serial_items[L::kKinds];  // none for kSm90Ws (split blocks only)
  std::vector<int32_t> items[L::kKinds], serial_ints[L::kKinds], combine_rows;
  int64_t q_row = 0, partial_row = 0, prefix_row = 0, prefix_scores = 0;
  int32_t pairs = 0;  // (sequence, row block) pairs of the Hopper kernel
  for (size_t i = 0; i < n; ++i) {
    const AttentionBatchSeq& q = seqs[i];
    const size_t desc = base + L::kHeaderInts + i * L::kSeqInts;
    const int splits = plan.splits[i];
    const int kind = kinds[i];
    const bool attended = q.n_q > 0 && !q.attended_elsewhere;
    const bool serial = serial_kind[kind] && attended && may_run_serial(q, splits);
    st[desc + L::kQRow] = static_cast<int32_t>(q_row);
    st[desc + L::kNQ] = q.n_q;
    st[desc + L::kNKeys] = q.n_keys;
    st[desc + L::kKind] = static_cast<int32_t>(q.kind);
    st[desc + L::kBlockSize] = q.block_size;
    st[desc + L::kSplits] = splits;
    st[desc + L::kPartialRow] = static_cast<int32_t>(partial_row);
    st[desc + L::kPrefixRow] = q.prefix_lse ? static_cast<int32_t>(prefix_row) : -1;
    st[desc + L::kKeysAtPositions] = q.keys_at_positions ? 1 : 0;
    plan.prefix_row.push_back(q.prefix_lse ? prefix_row : -1);
    if (q.prefix_lse) prefix_row += int64_t{splits} * q.n_q * shape.heads;  // one split too
    plan.prefix_scores_at.push_back(q.score_queries.empty() ? -1 : prefix_scores);
    prefix_scores += stage_score_map(q, shape, st, base, desc, prefix_scores);
    stage_keys(q, shape, i, st, base, desc);
    plan.device_keys_at.push_back(q.device_keys ? st[desc + L::kKeysAt] : -1);
    stage_mask(q, st, base, desc);
    // The combine pass merges the rows of sequences of several splits; with one, the kernel
    // writes the output itself (write_split_partials()), and a serial item merges its own.
    if (splits > 1 && !serial)
      for (int t = 0; t < q.n_q; ++t)
        combine_rows.insert(combine_rows.end(),
                            {static_cast<int32_t>(q_row + t), static_cast<int32_t>(i)});
    // Split blocks: splits outside, row blocks inside, so that the blocks sharing a key range run
    // side by side and share its K/V through L2.
    auto append_item = [&](std::vector<int32_t>& to, int rb, int sp, int last) {
      to.insert(to.end(), {static_cast<int32_t>(i), rb, sp, pairs + rb, last});
      to.insert(to.end(), st.begin() + desc, st.begin() + desc + L::kSeqInts);
    };
    if (serial) {
      for (int rb = 0; rb < row_blocks[i]; ++rb) {
        serial_items[kind].push_back({q.n_keys, serial_ints[kind].size()});
        append_item(serial_ints[kind], rb, L::kSerialSplit, splits - 1);
      }
    } else {
      const int per_item = may_group(q, kind) ? group : 1;
      const bool ws = takes_sm90_ws(q, kind, splits, shape);
      if (ws && attended && q.kind == MaskKind::kBlockCausal) plan.need.ws_block_causal = true;
      auto& list = items[ws ? L::kSm90Ws : kind];
      // The warp-specialised kernel's row blocks last first: under a causal rule the longest blocks
      // start in the first wave, and the last wave holds short ones instead of a tail of the
      // longest.
      for (int sp = 0; sp < splits && attended; sp += per_item)
        for (int b = 0; b < row_blocks[i]; ++b)
          append_item(list, ws ? row_blocks[i] - 1 - b : b, sp,
                      std::min(sp + per_item, splits) - 1);
    }
    if (kind == L::kSm90 && attended) pairs += row_blocks[i];
    q_row += q.n_q;
    if (splits > 1) partial_row += int64_t{splits} * q.n_q * shape.heads;  // one: no partials
    if (q_row > INT32_MAX || partial_row > INT32_MAX || prefix_row > INT32_MAX ||
        prefix_scores > INT32_MAX || st.size() - base > INT32_MAX / 4)
      fail("attention_batch: batch too large (", q_row, " query rows, ", partial_row,
           " partial rows, ", prefix_scores, " raw prefix scores)");
  }
  for (int kind = 0; kind < L::kKinds; ++kind) {
    std::stable_sort(serial_items[kind].begin(), serial_items[kind].end(),
                     [](const SerialItem& a, const SerialItem& b) { return a.keys > b.keys; });
    const size_t split_ints = items[kind].size();
    st[base + L::kItemCount + kind] = static_cast<int32_t>(
        (split_ints + serial_items[kind].size() * L::kItemInts) / L::kItemInts);
    st[base + L::kItemsAt + kind] = static_cast<int32_t>(st.size() - base);
    for (const SerialItem& it : serial_items[kind]) {
      const auto from = serial_ints[kind].begin() + static_cast<std::ptrdiff_t>(it.at);
      st.insert(st.end(), from, from + L::kItemInts);
    }
    st.insert(st.end(), items[kind].begin(), items[kind].end());
  }
  st[base + L::kCombineRows] = static_cast<int32_t>(combine_rows.size() / 2);
  st[base + L::kCombineAt] = static_cast<int32_t>(st.size() - base);
  st.insert(st.end(), combine_rows.begin(), combine_rows.end());
  plan.ints = st.size() - base;
  plan.need.q_rows = static_cast<int>(q_row);
  plan.need.mma_items = st[base + L::kItemCount + L::kMma];
  plan.need.sm90_items = st[base + L::kItemCount + L::kSm90];
  plan.need.sm90_ws_items = st[base + L::kItemCount + L::kSm90Ws];
  plan.need.partial_rows = partial_row;
  plan.need.prefix_rows = prefix_row;
  plan.need.prefix_score_floats = prefix_scores;
  plan.need.combine = !combine_rows.empty();
  return plan;
}

}  // namespace dllm::cuda
