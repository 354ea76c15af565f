// Batched paged attention (kernels.h: attention_batch_plan / attention_batch) against the CPU
// reference on fresh random inputs: batches of 1-40 sequences mixing every rule, 1-128 queries
// (both kernels, mixed in one batch), up to 8K keys, key lists and plain ranges, shuffled
// non-contiguous pages of 8 / 16 / 64 slots, head_dim 32 / 64 / 128. Each sequence's output must
// match the reference and be bitwise equal to the same sequence run alone (a small grid: the
// deep pipelines and a block per combine row), with padded capacities, and under CUDA-graph
// replay with new plans; the single-sequence attention() (merging its splits in the kernel where
// it can) must give the batched call's bits too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <numeric>
#include <span>
#include <string>

#include "attention/attention_rule.h"
#include "attention/sparse_attention.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/attention_batch_layout.h"
#include "backend/cuda/attention_dispatch.h"
#include "backend/cuda/attention_sm90.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sparse_select.h"
#include "cuda_test_util.h"

namespace dllm {
namespace {

using cuda::bf16;
using test::rel_error;

struct SeqCase {
  int n_q, n_cache;
  AttentionKind kind;
  int block = 0;
  bool key_list = false;      // an explicit (shuffled) key list instead of slots 0..n_keys-1
  bool queries_only = false;  // kCustom: the mask covers the query keys only
};

cuda::MaskKind mask_kind(AttentionKind k) {
  return k == AttentionKind::kCausal          ? cuda::MaskKind::kCausal
         : k == AttentionKind::kBidirectional ? cuda::MaskKind::kBidirectional
         : k == AttentionKind::kBlockCausal   ? cuda::MaskKind::kBlockCausal
                                              : cuda::MaskKind::kCustom;
}

// A paged K/V pool of one layer (random bf16) with each physical slot's logical position.
struct Pool {
  cuda::AttentionBatchShape shape;
  std::vector<float> k, v;  // bf16-rounded values
  std::vector<int32_t> slot_pos;
  std::vector<int32_t> free_pages;  // shuffled
  cuda::DeviceBuffer<uint16_t> dk, dv;
  cuda::DeviceBuffer<int32_t> dpos;

  Pool(int heads, int kv, int d, int page_size, int pages, std::mt19937& rng) {
    shape = {heads, kv, d, page_size, int64_t{pages} * page_size, 1.0f / std::sqrt(float(d))};
    const size_t n = static_cast<size_t>(shape.pool_slots) * kv * d;
    k = test::random_floats(n, rng);
    v = test::random_floats(n, rng);
    dk = test::to_device(test::round_bf16(k));
    dv = test::to_device(test::round_bf16(v));
    slot_pos.assign(shape.pool_slots, 0);
    free_pages.resize(pages);
    std::iota(free_pages.begin(), free_pages.end(), 0);
    std::shuffle(free_pages.begin(), free_pages.end(), rng);
  }
  int take_page() {
    if (free_pages.empty()) ADD_FAILURE() << "pool too small";
    const int p = free_pages.back();
    free_pages.pop_back();
    return p;
  }
  void upload_positions() { dpos = test::to_device(slot_pos); }
};

// One sequence in the pool: its pages, keys, queries, mask and CPU reference output.
struct Seq {
  SeqCase c;
  int n_keys = 0;
  std::vector<int32_t> key_slots, page_table;  // logical key slots (key_list only)
  std::vector<uint8_t> device_mask;
  std::vector<float> q;
  std::vector<uint16_t> qb;
  std::vector<int32_t> q_pos;
  std::vector<float> ref;
  // MAGE's hand-over: whether the call writes its prefix-only (m, l), and the reference
  // log-sum-exp [n_q, heads] of each row's scaled scores over the visible cache keys (double).
  bool prefix_lse = false;
  std::vector<double> ref_prefix_lse;
  bool keys_at_positions = false;      // AttentionBatchSeq::keys_at_positions
  std::vector<int32_t> phys;           // physical pool slot of each key
  std::vector<int32_t> score_queries;  // AttentionBatchSeq::score_queries

  cuda::AttentionBatchSeq desc() const {
    cuda::AttentionBatchSeq d;
    d.n_q = c.n_q;
    d.n_keys = n_keys;
    d.key_slots = key_slots;
    d.page_table = page_table;
    d.kind = mask_kind(c.kind);
    d.block_size = c.block;
    d.custom_mask = device_mask;
    d.custom_mask_queries_only = c.queries_only;
    d.prefix_lse = prefix_lse;
    d.keys_at_positions = keys_at_positions;
    d.score_queries = score_queries;
    return d;
  }
};

// Builds `c` in the pool (new pages; positions: the key index for plain ranges, a permutation for
// key lists) with its reference output.
Seq make_seq(const SeqCase& c, Pool& pool, std::mt19937& rng) {
  const auto& s = pool.shape;
  Seq q;
  q.c = c;
  q.n_keys = c.n_cache + c.n_q;
  const int logical = q.n_keys + (c.key_list ? 9 : 0);
  for (int i = 0; i < (logical + s.page_size - 1) / s.page_size; ++i)
    q.page_table.push_back(pool.take_page());
  std::vector<int32_t> logical_slot(q.n_keys), pos(q.n_keys);
  std::iota(logical_slot.begin(), logical_slot.end(), 0);
  std::iota(pos.begin(), pos.end(), 0);
  if (c.key_list) {
    std::vector<int32_t> all(logical);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), q.n_keys, logical_slot.begin());  // skips some slots entirely
    std::shuffle(pos.begin(), pos.end(), rng);
    q.key_slots = logical_slot;
  }
  std::vector<int64_t> phys(q.n_keys);
  for (int j = 0; j < q.n_keys; ++j) {
    phys[j] = int64_t{q.page_table[logical_slot[j] / s.page_size]} * s.page_size +
              logical_slot[j] % s.page_size;
    pool.slot_pos[phys[j]] = pos[j];
    q.phys.push_back(static_cast<int32_t>(phys[j]));
  }
  for (int i = 0; i < c.n_q; ++i) q.q_pos.push_back(pos[c.n_cache + i]);
  q.q = test::random_floats(size_t(c.n_q) * s.heads * s.head_dim, rng);
  q.qb = test::round_bf16(q.q);

  AttentionRule rule{c.kind, c.block, {}};
  if (c.kind == AttentionKind::kCustom) {
    rule.custom_mask.resize(size_t(c.n_q) * q.n_keys);
    for (auto& b : rule.custom_mask) b = rng() % 4 != 0;
    if (c.queries_only) {
      for (int i = 0; i < c.n_q; ++i)
        for (int j = 0; j < c.n_cache; ++j) rule.custom_mask[size_t(i) * q.n_keys + j] = 1;
      for (int i = 0; i < c.n_q; ++i)
        q.device_mask.insert(q.device_mask.end(),
                             rule.custom_mask.begin() + size_t(i) * q.n_keys + c.n_cache,
                             rule.custom_mask.begin() + size_t(i + 1) * q.n_keys);
    } else {
      for (int j = 0; j < q.n_keys && c.n_q > 0; ++j) rule.custom_mask[j] = 0;  // row 0: nothing
      q.device_mask = rule.custom_mask;
    }
  }
  const std::vector<int32_t> cache_pos(pos.begin(), pos.begin() + c.n_cache);
  std::vector<uint8_t> visible;
  build_visibility(rule, cache_pos, q.q_pos, visible);
  std::vector<const float*> krows, vrows;
  const int kvd = s.kv_heads * s.head_dim;
  for (int j = 0; j < q.n_keys; ++j) {
    krows.push_back(&pool.k[phys[j] * kvd]);
    vrows.push_back(&pool.v[phys[j] * kvd]);
  }
  const int group = s.heads / s.kv_heads;
  for (int i = 0; i < c.n_q; ++i)
    for (int hq = 0; hq < s.heads; ++hq) {
      const float* qr = &q.q[(size_t(i) * s.heads + hq) * s.head_dim];
      std::vector<double> sc;
      for (int j = 0; j < c.n_cache; ++j) {
        if (!visible[size_t(i) * q.n_keys + j]) continue;
        const float* kr = krows[j] + (hq / group) * s.head_dim;
        double dot = 0;
        for (int t = 0; t < s.head_dim; ++t) dot += double(qr[t]) * kr[t];
        sc.push_back(dot * s.scale);
      }
      double mx = -INFINITY, z = 0;
      for (double v : sc) mx = std::max(mx, v);
      for (double v : sc) z += std::exp(v - mx);
      q.ref_prefix_lse.push_back(sc.empty() ? -INFINITY : mx + std::log(z));
    }
  q.ref.assign(size_t(c.n_q) * s.heads * s.head_dim, 0.0f);
  if (c.n_q > 0)
    cpu::attention(q.q.data(), s.heads * s.head_dim, krows, vrows, visible, q.ref.data(),
                   s.heads * s.head_dim, c.n_q, s.heads, s.kv_heads, s.head_dim, s.scale);
  return q;
}

cuda::AttentionBatchCapacity padded(cuda::AttentionBatchCapacity c, int extra) {
  c.q_rows += extra;
  c.mma_items += extra ? 2 * extra : 0;
  c.sm90_items += extra;
  c.sm90_ws_items += extra;
  c.partial_rows += extra * 1000;
  return c;
}

// Device buffers of a batched call sized for a capacity, reused across calls (as a captured
// graph needs).
struct BatchRun {
  cuda::AttentionBatchParams p;
  cuda::DeviceBuffer<uint16_t> q, out;
  cuda::DeviceBuffer<int32_t> q_pos, plan;
  cuda::DeviceBuffer<float> ws, prefix_ml, prefix_scores;

  BatchRun(const Pool& pool, const cuda::AttentionBatchCapacity& cap, size_t plan_ints) {
    const auto& s = pool.shape;
    const size_t row = size_t(s.heads) * s.head_dim;
    q.resize(std::max<size_t>(cap.q_rows * row, 1), "q");
    out.resize(std::max<size_t>(cap.q_rows * row, 1), "out");
    q_pos.resize(std::max(cap.q_rows, 1), "q positions");
    plan.resize(plan_ints, "plan");
    cuda::attention_batch_workspace_ensure(
        ws, cuda::attention_batch_workspace_floats(cap.partial_rows, s.head_dim), nullptr);
    p.q = reinterpret_cast<const bf16*>(q.get());
    p.k_pool = reinterpret_cast<const bf16*>(pool.dk.get());
    p.v_pool = reinterpret_cast<const bf16*>(pool.dv.get());
    p.slot_positions = pool.dpos.get();
    p.q_positions = q_pos.get();
    p.plan = plan.get();
    p.workspace = ws.get();
    p.out = reinterpret_cast<bf16*>(out.get());
    p.shape = s;
    p.capacity = cap;
    if (cap.prefix_rows > 0) {
      prefix_ml.resize(size_t(cap.prefix_rows) * 2, "prefix (m, l)");
      p.prefix_ml = prefix_ml.get();
    }
    if (cap.prefix_score_floats > 0) {
      prefix_scores.resize(size_t(cap.prefix_score_floats), "raw prefix scores");
      p.prefix_scores = prefix_scores.get();
    }
  }

  // Stages the plan of `seqs` and their queries (the plan at the start of staging, so its device
  // address stays put) and NaN-poisons the output.
  cuda::AttentionBatchPlan stage(
      const std::vector<const Seq*>& seqs,
      cuda::AttentionBatchSplitMode mode = cuda::AttentionBatchSplitMode::kAuto, int group = 0) {
    std::vector<cuda::AttentionBatchSeq> descs;
    for (const Seq* s : seqs) descs.push_back(s->desc());
    std::vector<int32_t> staging;
    const auto bp = cuda::attention_batch_plan(descs, p.shape, staging, mode, group);
    EXPECT_TRUE(p.capacity.covers(bp.need));
    EXPECT_LE(staging.size(), plan.size());
    std::vector<uint16_t> qs;
    std::vector<int32_t> qp;
    for (const Seq* s : seqs) {
      qs.insert(qs.end(), s->qb.begin(), s->qb.end());
      qp.insert(qp.end(), s->q_pos.begin(), s->q_pos.end());
    }
    DLLM_CUDA_CHECK(
        cudaMemcpy(plan.get(), staging.data(), staging.size() * 4, cudaMemcpyHostToDevice));
    DLLM_CUDA_CHECK(cudaMemcpy(q.get(), qs.data(), qs.size() * 2, cudaMemcpyHostToDevice));
    DLLM_CUDA_CHECK(cudaMemcpy(q_pos.get(), qp.data(), qp.size() * 4, cudaMemcpyHostToDevice));
    DLLM_CUDA_CHECK(cudaMemset(out.get(), 0xff, out.size() * 2));  // NaN
    return bp;
  }

  // Each sequence's output rows (bf16 bits).
  std::vector<std::vector<uint16_t>> outputs(const std::vector<const Seq*>& seqs) {
    const auto all = test::to_host(out);
    std::vector<std::vector<uint16_t>> r;
    size_t at = 0;
    const size_t row = size_t(p.shape.heads) * p.shape.head_dim;
    for (const Seq* s : seqs) {
      r.emplace_back(all.begin() + at, all.begin() + at + s->c.n_q * row);
      at += s->c.n_q * row;
    }
    return r;
  }
};

std::vector<float> to_floats(const std::vector<uint16_t>& bits) {
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) f[i] = bf16_to_f32(bits[i]);
  return f;
}

// Runs `seqs` as one batch (capacity = need + pad); returns each sequence's output.
std::vector<std::vector<uint16_t>> run_batch(
    const Pool& pool, const std::vector<const Seq*>& seqs, int pad,
    cuda::AttentionBatchPlan* plan_out = nullptr,
    cuda::AttentionBatchSplitMode mode = cuda::AttentionBatchSplitMode::kAuto, int group = 0) {
  std::vector<cuda::AttentionBatchSeq> descs;
  for (const Seq* s : seqs) descs.push_back(s->desc());
  std::vector<int32_t> staging;
  const auto bp = cuda::attention_batch_plan(descs, pool.shape, staging, mode, group);
  if (plan_out) *plan_out = bp;
  BatchRun run(pool, padded(bp.need, pad), staging.size());
  run.stage(seqs, mode, group);
  // Twice on one workspace, as layers do: the in-kernel merge's counters must be back at zero.
  for (int call = 0; call < 2; ++call) {
    cuda::attention_batch(run.p, nullptr);
    std::vector<int32_t> counters(cuda::batch_layout::kMergeCounters);
    DLLM_CUDA_CHECK(
        cudaMemcpy(counters.data(), run.ws.get(), counters.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < counters.size(); ++i) EXPECT_EQ(counters[i], 0) << "counter " << i;
  }
  return run.outputs(seqs);
}

// Reference within bf16 tolerance, zeros for a row that sees nothing.
void expect_matches_reference(const Seq& s, const std::vector<uint16_t>& got, const char* what) {
  const auto f = to_floats(got);
  EXPECT_LT(rel_error(f, s.ref), 1e-2)
      << what << ": n_q " << s.c.n_q << " keys " << s.n_keys << " kind " << int(s.c.kind)
      << " block " << s.c.block << " key list " << s.c.key_list;
  if (s.c.kind == AttentionKind::kCustom && !s.c.queries_only && s.c.n_q > 0) {
    const size_t row = s.ref.size() / s.c.n_q;
    for (size_t t = 0; t < row; ++t) ASSERT_EQ(f[t], 0.0f) << what << ": row 0 sees nothing";
  }
}

// A random mix of every rule, both kernels' row counts, key lists and plain ranges.
std::vector<SeqCase> random_cases(int n, int max_cache, std::mt19937& rng) {
  const int n_qs[] = {1, 2, 3, 4, 5, 7, 8, 12, 15, 16, 17, 24, 32, 33, 64, 100, 128};
  std::vector<SeqCase> cases;
  for (int i = 0; i < n; ++i) {
    SeqCase c;
    c.n_q = n_qs[rng() % std::size(n_qs)];
    c.n_cache = rng() % 3 == 0 ? static_cast<int>(rng() % 40) : static_cast<int>(rng() % max_cache);
    switch (i % 6) {
      case 0:
        c.kind = AttentionKind::kCausal;
        break;
      case 1:
        c.kind = AttentionKind::kBidirectional;
        break;
      case 2:
        c.kind = AttentionKind::kBlockCausal;
        c.block = 4;
        break;
      case 3:
        c.kind = AttentionKind::kBlockCausal;
        c.block = 32;
        break;
      case 4:
        c.kind = AttentionKind::kCustom;
        break;
      default:
        c.kind = AttentionKind::kCustom;
        c.queries_only = true;
        break;
    }
    c.key_list = rng() % 3 == 0;
    cases.push_back(c);
  }
  return cases;
}

// Every sequence of the batch: the reference, and the bits of the same sequence alone (also
// with a padded capacity).
void check_batch(Pool& pool, std::vector<Seq>& seqs) {
  std::vector<const Seq*> all;
  for (const Seq& s : seqs) all.push_back(&s);
  cuda::AttentionBatchPlan plan;
  const auto batched = run_batch(pool, all, 0, &plan);
  EXPECT_GT(plan.need.q_rows, 0);
  const auto batched_padded = run_batch(pool, all, 7);
  for (size_t i = 0; i < seqs.size(); ++i) {
    SCOPED_TRACE(testing::Message()
                 << "sequence " << i << " of " << seqs.size() << ", splits " << plan.splits[i]);
    expect_matches_reference(seqs[i], batched[i], "batched");
    const auto alone = run_batch(pool, {&seqs[i]}, 0);
    EXPECT_TRUE(alone[0] == batched[i]) << "batched != alone";
    EXPECT_TRUE(batched_padded[i] == batched[i]) << "padded capacity changed the bits";
  }
}

TEST(CudaAttentionBatch, MatchesCpuAndIsBatchInvariant) {
  std::mt19937 rng(101);
  struct Round {
    int page_size, seqs, max_cache, heads, kv, d;
  };
  for (const Round r : {Round{16, 40, 1500, 8, 2, 128}, Round{8, 12, 3000, 8, 2, 128},
                        Round{64, 6, 2000, 32, 8, 128}, Round{16, 9, 900, 6, 2, 64},
                        Round{16, 5, 600, 4, 4, 128}, Round{16, 10, 400, 8, 2, 32}}) {
    SCOPED_TRACE(testing::Message()
                 << "page size " << r.page_size << ", " << r.seqs << " sequences, heads " << r.heads
                 << "/" << r.kv << " d " << r.d);
    Pool pool(r.heads, r.kv, r.d, r.page_size, (r.seqs * (r.max_cache + 200)) / r.page_size + 64,
              rng);
    std::vector<Seq> seqs;
    for (const SeqCase& c : random_cases(r.seqs, r.max_cache, rng))
      seqs.push_back(make_seq(c, pool, rng));
    pool.upload_positions();
    check_batch(pool, seqs);
  }
}

// Long keys (8K) with few and many queries, a sequence with no query rows, 1-key sequences.
TEST(CudaAttentionBatch, LongAndDegenerateSequences) {
  std::mt19937 rng(102);
  Pool pool(8, 2, 128, 64, 8 * 8300 / 64 + 64, rng);
  const std::vector<SeqCase> cases = {
      {4, 8100, AttentionKind::kBlockCausal, 32, false},
      {0, 5, AttentionKind::kCausal},
      {1, 0, AttentionKind::kCausal},
      {32, 8000, AttentionKind::kCausal, 0, true},
      {2, 3, AttentionKind::kCustom, 0, false},
      {128, 6000, AttentionKind::kBidirectional},
      {16, 7000, AttentionKind::kCustom, 0, false, true},
  };
  std::vector<Seq> seqs;
  for (const SeqCase& c : cases) seqs.push_back(make_seq(c, pool, rng));
  pool.upload_positions();
  check_batch(pool, seqs);
}

// A round of the split tests: the pool's shape and a batch of random sequences.
struct SplitRound {
  int page_size, seqs, max_cache, heads, kv, d;
};

// random_cases() with half the caches long (max_cache / 2 and more): sequences of many splits, so
// that serial items and split groups have something to take. Positions uploaded.
std::vector<Seq> split_heavy_seqs(int n, int max_cache, Pool& pool, std::mt19937& rng) {
  std::vector<Seq> seqs;
  for (SeqCase c : random_cases(n, max_cache, rng)) {
    if (rng() % 2) c.n_cache = max_cache / 2 + static_cast<int>(rng() % (max_cache / 2));
    seqs.push_back(make_seq(c, pool, rng));
  }
  pool.upload_positions();
  return seqs;
}

// Serial items (batch_layout::kSerialSplit: one block computes a sequence's splits in turn and
// merges them) give the bits of one block per split merged by the combine pass, on random ragged
// batches of both kernels: shuffled pages of 8 / 16 / 64 slots, key lists, every rule, 1-128
// queries, up to 3K keys (sequences of 2-16 splits run serial, longer ones stay split blocks in
// the same call), head_dim 32 / 64 / 128; also with padded capacities, and against the reference.
TEST(CudaAttentionBatch, SerialSplitsGiveTheParallelBits) {
  using Mode = cuda::AttentionBatchSplitMode;
  std::mt19937 rng(107);
  for (const SplitRound r :
       {SplitRound{16, 24, 3000, 32, 8, 128}, SplitRound{8, 16, 2000, 8, 2, 128},
        SplitRound{64, 12, 2500, 6, 2, 64}, SplitRound{16, 10, 1500, 4, 4, 32}}) {
    SCOPED_TRACE(testing::Message()
                 << "page size " << r.page_size << ", " << r.seqs << " sequences, heads " << r.heads
                 << "/" << r.kv << " d " << r.d);
    Pool pool(r.heads, r.kv, r.d, r.page_size, (r.seqs * (r.max_cache + 200)) / r.page_size + 64,
              rng);
    const std::vector<Seq> seqs = split_heavy_seqs(r.seqs, r.max_cache, pool, rng);
    std::vector<const Seq*> all;
    for (const Seq& s : seqs) all.push_back(&s);
    cuda::AttentionBatchPlan parallel_plan, serial_plan;
    const auto parallel = run_batch(pool, all, 0, &parallel_plan, Mode::kParallel);
    const auto serial = run_batch(pool, all, 0, &serial_plan, Mode::kSerial);
    const auto serial_padded = run_batch(pool, all, 5, nullptr, Mode::kSerial);
    int serial_seqs = 0;
    bool combine = false;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int splits = serial_plan.splits[i];
      ASSERT_EQ(splits, parallel_plan.splits[i]);
      const bool runs_serial =
          seqs[i].c.n_q > 0 && splits > 1 && splits <= cuda::batch_layout::kMaxSerialSplits;
      serial_seqs += runs_serial;
      combine = combine || (splits > 1 && !runs_serial);
      SCOPED_TRACE(testing::Message()
                   << "sequence " << i << " of " << seqs.size() << ": " << seqs[i].c.n_q
                   << " queries, " << seqs[i].n_keys << " keys, splits " << splits);
      expect_matches_reference(seqs[i], serial[i], "serial");
      EXPECT_TRUE(serial[i] == parallel[i]) << "serial splits != split blocks";
      EXPECT_TRUE(serial_padded[i] == serial[i]) << "padded capacity changed the bits";
    }
    EXPECT_GT(serial_seqs, 2) << "the round must exercise serial items";
    EXPECT_EQ(serial_plan.need.combine, combine);
    EXPECT_TRUE(parallel_plan.need.combine);
    EXPECT_LT(serial_plan.need.mma_items + serial_plan.need.sm90_items,
              parallel_plan.need.mma_items + parallel_plan.need.sm90_items);
  }
}

// Split groups (several consecutive splits per block, merged by the combine pass) give the bits
// of a block per split, for every group size, on both rules' row counts.
TEST(CudaAttentionBatch, SplitGroupsGiveTheSplitBlocksBits) {
  using Mode = cuda::AttentionBatchSplitMode;
  std::mt19937 rng(109);
  for (const SplitRound r :
       {SplitRound{16, 24, 3000, 32, 8, 128}, SplitRound{8, 16, 2000, 8, 2, 64}}) {
    SCOPED_TRACE(testing::Message()
                 << r.seqs << " sequences, heads " << r.heads << "/" << r.kv << " d " << r.d);
    Pool pool(r.heads, r.kv, r.d, r.page_size, (r.seqs * (r.max_cache + 200)) / r.page_size + 64,
              rng);
    const std::vector<Seq> seqs = split_heavy_seqs(r.seqs, r.max_cache, pool, rng);
    std::vector<const Seq*> all;
    for (const Seq& s : seqs) all.push_back(&s);
    cuda::AttentionBatchPlan blocks_plan;
    const auto blocks = run_batch(pool, all, 0, &blocks_plan, Mode::kParallel, 1);
    for (int group : {2, 3, 16}) {
      SCOPED_TRACE(testing::Message() << "groups of " << group << " splits");
      cuda::AttentionBatchPlan group_plan;
      const auto grouped = run_batch(pool, all, 0, &group_plan, Mode::kParallel, group);
      const auto grouped_padded = run_batch(pool, all, 3, nullptr, Mode::kParallel, group);
      for (size_t i = 0; i < seqs.size(); ++i) {
        SCOPED_TRACE(testing::Message()
                     << "sequence " << i << ": " << seqs[i].c.n_q << " queries, " << seqs[i].n_keys
                     << " keys, splits " << group_plan.splits[i]);
        ASSERT_EQ(group_plan.splits[i], blocks_plan.splits[i]);
        expect_matches_reference(seqs[i], grouped[i], "grouped");
        EXPECT_TRUE(grouped[i] == blocks[i]) << "split groups != split blocks";
        EXPECT_TRUE(grouped_padded[i] == grouped[i]) << "padded capacity changed the bits";
      }
      EXPECT_LT(group_plan.need.mma_items, blocks_plan.need.mma_items)
          << "the round must exercise groups";
    }
  }
}

// A batch big enough to fill the GPU with serial items takes them by itself (kAuto; on the
// Hopper kernel: 50 sequences of 32 queries at GQA 4 and 8 KV heads, 400 blocks of 128 rows, more
// than 1.5 waves of two per SM on an H100), with the bits of split blocks.
TEST(CudaAttentionBatch, BigBatchRunsSerialItemsWithTheSameBits) {
  using Mode = cuda::AttentionBatchSplitMode;
  std::mt19937 rng(108);
  const int n = 50;
  Pool pool(32, 8, 128, 16, n * (800 + 64) / 16 + 64, rng);
  std::vector<Seq> seqs;
  for (int i = 0; i < n; ++i)
    seqs.push_back(make_seq(
        {32, 500 + static_cast<int>(rng() % 300), AttentionKind::kBlockCausal, 32, i % 5 == 0},
        pool, rng));
  pool.upload_positions();
  std::vector<const Seq*> all;
  for (const Seq& s : seqs) all.push_back(&s);
  cuda::AttentionBatchPlan auto_plan, parallel_plan;
  const auto chosen = run_batch(pool, all, 0, &auto_plan, Mode::kAuto);
  const auto parallel = run_batch(pool, all, 0, &parallel_plan, Mode::kParallel);
  const bool sm90 = cuda::attention_use_sm90(128, 32 * 4);
  if (sm90 && cuda::device_sm_count() <= 132 && !std::getenv("DLLM_ATTN_BATCH_SERIAL") &&
      !std::getenv("DLLM_ATTN_BATCH_SERIAL_WAVES"))
    EXPECT_FALSE(auto_plan.need.combine) << "expected serial items on this GPU";
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(testing::Message() << "sequence " << i << ", splits " << auto_plan.splits[i]);
    EXPECT_GT(auto_plan.splits[i], 1);
    expect_matches_reference(seqs[i], chosen[i], "auto");
    EXPECT_TRUE(chosen[i] == parallel[i]) << "auto != split blocks";
  }
}

// Cold prefills (nothing cached, key j at position j) skip the tiles past each row block's last
// visible key (visible_keys_end, attention_mask.cuh): under block-causal where the plan says the
// keys sit at their positions, with the bits of the whole pass; under causal always (the rule is
// by index), against the reference. Prompts of several row blocks of both kernels (head_dim 128:
// Hopper, 64: mma.sync) beside a decoding step.
TEST(CudaAttentionBatch, ColdPrefillSkipsHiddenTilesWithTheSameBits) {
  std::mt19937 rng(109);
  for (const int d : {128, 64}) {
    SCOPED_TRACE(testing::Message() << "head_dim " << d);
    Pool pool(16, 4, d, 16, 300, rng);
    std::vector<Seq> seqs;
    for (const SeqCase c :
         {SeqCase{600, 0, AttentionKind::kBlockCausal, 4},
          SeqCase{333, 0, AttentionKind::kBlockCausal, 32}, SeqCase{500, 0, AttentionKind::kCausal},
          SeqCase{4, 500, AttentionKind::kBlockCausal, 4},
          SeqCase{77, 0, AttentionKind::kBlockCausal, 4}})
      seqs.push_back(make_seq(c, pool, rng));
    pool.upload_positions();
    std::vector<const Seq*> all;
    for (const Seq& s : seqs) all.push_back(&s);
    const auto whole = run_batch(pool, all, 0);
    for (Seq& s : seqs) s.keys_at_positions = s.c.n_cache == 0;
    const auto skipping = run_batch(pool, all, 3);
    for (size_t i = 0; i < seqs.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "sequence " << i << ": " << seqs[i].c.n_q << " queries");
      expect_matches_reference(seqs[i], skipping[i], "skipping hidden tiles");
      EXPECT_TRUE(skipping[i] == whole[i]) << "skipping hidden tiles changed the bits";
    }
  }
}

// One captured call replayed with new plans of the same capacities: other sequences, key counts
// and page tables, fewer sequences.
TEST(CudaAttentionBatch, GraphReplayWithNewPlans) {
  std::mt19937 rng(103);
  Pool pool(8, 2, 128, 16, 40 * 2200 / 16 + 64, rng);
  std::vector<std::vector<Seq>> steps;
  for (int n : {6, 9, 1, 4}) {
    std::vector<Seq> seqs;
    for (const SeqCase& c : random_cases(n, 2000, rng)) seqs.push_back(make_seq(c, pool, rng));
    steps.push_back(std::move(seqs));
  }
  pool.upload_positions();
  cuda::AttentionBatchCapacity cap{1024, 2048, 1024, 1024, 1 << 20};
  BatchRun run(pool, cap, 1 << 18);
  cudaStream_t stream;
  DLLM_CUDA_CHECK(cudaStreamCreate(&stream));
  std::vector<const Seq*> first;
  for (const Seq& s : steps[0]) first.push_back(&s);
  run.stage(first);
  cuda::attention_batch(run.p, stream);  // warm-up: kernel attributes are set outside the capture
  DLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DLLM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cuda::attention_batch(run.p, stream);
  DLLM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  DLLM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (size_t st = 0; st < steps.size(); ++st) {
    SCOPED_TRACE(testing::Message() << "replay " << st);
    std::vector<const Seq*> seqs;
    for (const Seq& s : steps[st]) seqs.push_back(&s);
    run.stage(seqs);
    DLLM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    DLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto got = run.outputs(seqs);
    const auto direct = run_batch(pool, seqs, 0);
    for (size_t i = 0; i < seqs.size(); ++i) {
      expect_matches_reference(*seqs[i], got[i], "replayed");
      EXPECT_TRUE(got[i] == direct[i]) << "replay != direct call, sequence " << i;
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The single-sequence attention() over `s` (its pool a contiguous cache: pages 0, 1, 2, ...) with
// `splits` splits: the Hopper split kernel's single-sequence form at head_dim 128 and >= 64 rows.
// merges: whether that kernel merged its splits itself.
std::vector<uint16_t> run_single_sequence(const Pool& pool, const Seq& s, int splits,
                                          bool* merges = nullptr) {
  const int d = pool.shape.head_dim, heads = pool.shape.heads, n_keys = s.n_keys;
  auto dq = test::to_device(s.qb);
  auto dqpos = test::to_device(s.q_pos);
  auto dn = test::to_device(std::vector<int32_t>{n_keys});
  cuda::AttentionParams p;
  p.q = reinterpret_cast<const bf16*>(dq.get());
  p.k_cache = reinterpret_cast<const bf16*>(pool.dk.get());
  p.v_cache = reinterpret_cast<const bf16*>(pool.dv.get());
  p.n_keys = dn.get();
  p.slot_positions = pool.dpos.get();
  p.q_positions = dqpos.get();
  p.kind = mask_kind(s.c.kind);
  p.block_size = s.c.block;
  p.n_q = s.c.n_q;
  p.max_keys = n_keys;
  p.heads = heads;
  p.kv_heads = pool.shape.kv_heads;
  p.head_dim = d;
  p.scale = pool.shape.scale;
  p.splits = splits;
  cuda::DeviceBuffer<float> ws;
  cuda::attention_workspace_ensure(
      ws, cuda::attention_workspace_floats(s.c.n_q, heads, d, p.splits), nullptr);
  cuda::attention_use_workspace(p, ws.get());
  cuda::DeviceBuffer<uint16_t> out(s.qb.size(), "out");
  p.out = reinterpret_cast<bf16*>(out.get());
  cuda::attention(p, nullptr);
#ifdef DLLM_HAVE_SM90A
  if (merges) *merges = cuda::sm90_attention_merges(p);
#endif
  return test::to_host(out);
}

// The single-sequence attention() on a contiguous cache, with the batched rule's split count,
// gives the batched call's bits: its combine pass and the Hopper kernel's in-kernel merge (the
// one-wave case) do the same arithmetic (attention_merge.cuh).
TEST(CudaAttentionBatch, SingleSequenceCallGivesTheBatchedBits) {
  std::mt19937 rng(104);
  struct Case {
    int n_q, n_cache, heads, kv;
    // On an H100 SXM / H200: the Hopper split kernel merges in the kernel (30000 keys: split
    // blocks of the warp-specialised kernel, merged by the combine pass).
    bool expect_merge;
  };
  for (const Case c :
       {Case{32, 16000, 32, 8, true}, Case{32, 30000, 32, 8, false}, Case{16, 3000, 32, 8, false},
        Case{4, 5000, 32, 8, false}, Case{8, 700, 32, 8, false}}) {
    SCOPED_TRACE(testing::Message() << c.n_q << " queries, " << c.n_cache << " cached");
    const int d = 128, n_keys = c.n_cache + c.n_q;
    // Contiguous: one page table of pages 0, 1, 2, ... is the legacy cache layout.
    Pool pool(c.heads, c.kv, d, 16, (n_keys + 15) / 16, rng);
    std::iota(pool.free_pages.rbegin(), pool.free_pages.rend(), 0);
    Seq s = make_seq({c.n_q, c.n_cache, AttentionKind::kBlockCausal, 32}, pool, rng);
    pool.upload_positions();
    cuda::AttentionBatchPlan plan;
    const auto batched = run_batch(pool, {&s}, 0, &plan);
    expect_matches_reference(s, batched[0], "batched");
    // A capacity of more Hopper blocks than one wave: the combine pass instead of the in-kernel
    // merge, same bits.
    cuda::AttentionBatchParams probe;
    probe.shape = pool.shape;
    probe.capacity = plan.need;
    const bool merged = cuda::attention_batch_merges(probe);
    probe.capacity.sm90_items += 300;
    EXPECT_FALSE(cuda::attention_batch_merges(probe));
    EXPECT_TRUE(run_batch(pool, {&s}, 300)[0] == batched[0]) << "in-kernel merge != combine";
#ifdef DLLM_HAVE_SM90A
    if (c.expect_merge && cuda::device_compute_capability() == 90 &&
        cuda::device_sm_count() == 132 && !std::getenv("DLLM_ATTN_MERGE"))
      EXPECT_TRUE(merged) << "splits " << plan.splits[0];
#else
    (void)merged;
#endif

    bool single_merged = false;
    EXPECT_TRUE(run_single_sequence(pool, s, plan.splits[0], &single_merged) == batched[0])
        << "attention() != attention_batch()";
#ifdef DLLM_HAVE_SM90A
    if (c.expect_merge && cuda::device_compute_capability() == 90 &&
        cuda::device_sm_count() == 132 && !std::getenv("DLLM_ATTN_MERGE"))
      EXPECT_TRUE(single_merged) << "splits " << plan.splits[0];
#endif
  }
}

// A sequence of the warp-specialised kernel's tests (head_dim 128).
struct WsCase {
  int n_q, n_cache;
  AttentionKind kind;
  int block, heads, kv;
};
std::string describe(const WsCase& c) {
  return std::to_string(c.n_q) + " queries after " + std::to_string(c.n_cache) + ", kind " +
         std::to_string(int(c.kind)) + " block " + std::to_string(c.block) + ", heads " +
         std::to_string(c.heads) + "/" + std::to_string(c.kv);
}

// The warp-specialised kernel on prompts (batch_layout::kSm90Ws) gives the Hopper split
// kernel's bits: prompts of >= 512 rows per KV head (one split), cold and after a cached prefix,
// causal, bidirectional and block-causal (B = 4, 32), GQA 1 and 4, ragged last row blocks —
// against the single-sequence call (the split kernel with the same tiles) and the reference,
// alone, skipping hidden tiles, and batched beside a decoding step (which the split kernel takes).
TEST(CudaAttentionBatch, PrefillKernelGivesTheSplitKernelsBits) {
#ifndef DLLM_HAVE_SM90A
  GTEST_SKIP() << "built without sm_90a: no warp-specialised kernel";
#else
  if (!cuda::sm90_ws_attention_enabled())
    GTEST_SKIP()
        << "the warp-specialised kernel runs on compute capability 9.0 (DLLM_ATTN_SM90_WS on)";
  std::mt19937 rng(111);
  using K = AttentionKind;
  for (const WsCase c :
       {WsCase{1000, 0, K::kCausal, 0, 32, 8}, WsCase{333, 0, K::kBlockCausal, 4, 32, 8},
        WsCase{700, 0, K::kBidirectional, 0, 16, 4}, WsCase{257, 900, K::kBlockCausal, 32, 32, 8},
        WsCase{1500, 1500, K::kCausal, 0, 8, 8}, WsCase{130, 64, K::kBlockCausal, 4, 16, 4}}) {
    SCOPED_TRACE(describe(c));
    const int n_keys = c.n_cache + c.n_q, decode_cache = 3000;
    Pool pool(c.heads, c.kv, 128, 16, (n_keys + 15) / 16 + (decode_cache + 64) / 16 + 2, rng);
    std::iota(pool.free_pages.rbegin(), pool.free_pages.rend(), 0);  // the prompt: pages 0, 1, ..
    Seq s = make_seq({c.n_q, c.n_cache, c.kind, c.block}, pool, rng);
    const Seq decode = make_seq({32, decode_cache, K::kBlockCausal, 32}, pool, rng);
    pool.upload_positions();
    cuda::AttentionBatchPlan plan;
    const auto alone = run_batch(pool, {&s}, 0, &plan);
    ASSERT_EQ(plan.splits[0], 1);
    EXPECT_GT(plan.need.sm90_ws_items, 0);
    EXPECT_EQ(plan.need.sm90_items, 0);
    expect_matches_reference(s, alone[0], "prefill kernel");
    EXPECT_TRUE(run_single_sequence(pool, s, 1) == alone[0]) << "prefill kernel != split kernel";
    const auto batched = run_batch(pool, {&decode, &s}, 3, &plan);
    EXPECT_GT(plan.need.sm90_items + plan.need.mma_items, 0);  // the decoding step's
    EXPECT_TRUE(batched[1] == alone[0]) << "batched beside a decoding step changed the bits";
    s.keys_at_positions = c.n_cache == 0;  // a cold prefill, as the forward marks it
    EXPECT_TRUE(run_batch(pool, {&s}, 0)[0] == alone[0]) << "skipping hidden tiles changed bits";
  }
#endif
}

// The warp-specialised kernel's split blocks (a denoising block over a long cache: splits of
// >= 1024 keys, attention_batch_plan.cpp) give the split kernel's bits, merged by the combine pass
// where the single-sequence split kernel merges its splits itself.
TEST(CudaAttentionBatch, WarpSpecialisedSplitBlocksGiveTheSplitKernelsBits) {
#ifndef DLLM_HAVE_SM90A
  GTEST_SKIP() << "built without sm_90a: no warp-specialised kernel";
#else
  if (!cuda::sm90_ws_attention_enabled())
    GTEST_SKIP() << "the warp-specialised kernel runs on compute capability 9.0";
  std::mt19937 rng(112);
  using K = AttentionKind;
  for (const WsCase c : {WsCase{32, 40000, K::kBlockCausal, 32, 32, 8},
                         WsCase{16, 80000, K::kBidirectional, 0, 32, 4}}) {
    SCOPED_TRACE(describe(c));
    const int n_keys = c.n_cache + c.n_q;
    Pool pool(c.heads, c.kv, 128, 16, (n_keys + 15) / 16 + 2, rng);
    std::iota(pool.free_pages.rbegin(), pool.free_pages.rend(), 0);  // contiguous: pages 0, 1, ..
    Seq s = make_seq({c.n_q, c.n_cache, c.kind, c.block}, pool, rng);
    pool.upload_positions();
    cuda::AttentionBatchPlan plan;
    const auto batched = run_batch(pool, {&s}, 0, &plan, cuda::AttentionBatchSplitMode::kParallel);
    ASSERT_GT(plan.splits[0], 1);
    EXPECT_GT(plan.need.sm90_ws_items, 0);
    EXPECT_EQ(plan.need.sm90_items, 0);
    EXPECT_TRUE(run_single_sequence(pool, s, plan.splits[0]) == batched[0])
        << "warp-specialised split blocks != split kernel, " << plan.splits[0] << " splits";
  }
#endif
}

// MAGE's hand-over (method-specs §1.6 step 1): a batched call run with prefix_lse sequences,
// each one's prefix-only log-sum-exp merged on the device from the call's split partials
// (mage_prefix_lse_from_attention, every row used), and the outputs.
struct HandOver {
  cuda::AttentionBatchPlan plan;
  std::vector<std::vector<uint16_t>> out;
  std::vector<std::vector<float>> lse;  // [n_q, heads] per prefix_lse sequence (else empty)
  // Per score_queries sequence (else empty): its raw prefix scores,
  // [kv_heads][queries x G][prefix_score_stride(cache)]
  std::vector<std::vector<float>> scores;
  std::vector<float> prefix_ml;  // the call's prefix-only (m, l) rows (plan.prefix_row)
};
HandOver run_hand_over(const Pool& pool, const std::vector<const Seq*>& seqs) {
  std::vector<cuda::AttentionBatchSeq> descs;
  for (const Seq* s : seqs) descs.push_back(s->desc());
  std::vector<int32_t> staging;
  HandOver h;
  h.plan = cuda::attention_batch_plan(descs, pool.shape, staging);
  BatchRun run(pool, h.plan.need, staging.size());
  run.stage(seqs);
  cuda::attention_batch(run.p, nullptr);
  h.out = run.outputs(seqs);
  if (h.plan.need.prefix_rows > 0) h.prefix_ml = test::to_host(run.prefix_ml);
  const auto& sh = pool.shape;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Seq& s = *seqs[i];
    h.lse.emplace_back();
    h.scores.emplace_back();
    EXPECT_EQ(h.plan.prefix_row[i] >= 0, s.prefix_lse);
    EXPECT_EQ(h.plan.prefix_scores_at[i] >= 0, !s.score_queries.empty());
    if (!s.score_queries.empty()) {
      const auto all = test::to_host(run.prefix_scores);
      const auto first = all.begin() + h.plan.prefix_scores_at[i];
      h.scores.back().assign(first,
                             first + s.score_queries.size() * sh.heads *
                                         cuda::batch_layout::prefix_score_stride(s.c.n_cache));
    }
    if (!s.prefix_lse) continue;
    std::vector<int32_t> rows(size_t(s.c.n_q));
    std::iota(rows.begin(), rows.end(), 0);
    auto drows = test::to_device(rows);
    cuda::DeviceBuffer<float> lse(size_t(s.c.n_q) * sh.heads, "lse");
    cuda::ScoreSumParams sp;
    sp.rows_used = drows.get();
    sp.n_rows_used = s.c.n_q;
    sp.heads = sh.heads;
    sp.kv_heads = sh.kv_heads;
    sp.head_dim = sh.head_dim;
    cuda::mage_prefix_lse_from_attention(sp, run.prefix_ml.get() + h.plan.prefix_row[i] * 2,
                                         h.plan.splits[i], s.c.n_q, lse.get(), nullptr);
    h.lse.back() = test::to_host(lse);
  }
  return h;
}

// The prefix-only LSE the exact pass hands over, against the host's double over the visible
// cache keys, on both kernels (32 queries at GQA 4, head_dim 128: the Hopper kernel; fewer rows
// or smaller heads: mma.sync), one and many splits, prefixes ending inside a tile and on its edge
// (64 / 32 keys), key lists, every mask, an empty prefix. Asking for it changes no output bit,
// and a sequence's LSE has the same bits in a batch and alone.
TEST(CudaAttentionBatch, PrefixLseHandOverMatchesReferenceAndLeavesOutputsAlone) {
  std::mt19937 rng(105);
  struct Round {
    int heads, kv, d;
    std::vector<SeqCase> cases;
  };
  const std::vector<Round> rounds = {
      {32,
       8,
       128,
       {{32, 1000, AttentionKind::kBlockCausal, 32},
        {4, 777, AttentionKind::kBlockCausal, 4},
        {32, 64 * 20, AttentionKind::kBlockCausal, 32},
        {8, 32 * 37, AttentionKind::kCausal},
        {32, 9000, AttentionKind::kBlockCausal, 32},
        {16, 3000, AttentionKind::kCausal, 0, true},
        {5, 0, AttentionKind::kCausal},
        {12, 2500, AttentionKind::kBidirectional},
        {8, 900, AttentionKind::kCustom, 0, false, true},
        {32, 20000, AttentionKind::kBlockCausal, 32}}},  // the warp-specialised kernel's splits
      {8,
       2,
       64,
       {{32, 2000, AttentionKind::kBlockCausal, 32},
        {3, 100, AttentionKind::kCausal},
        {7, 4097, AttentionKind::kBlockCausal, 4, true}}},
      {32,
       8,
       16,  // the embedded models' heads
       {{32, 1500, AttentionKind::kBlockCausal, 32},
        {4, 64, AttentionKind::kBlockCausal, 4},
        {8, 5000, AttentionKind::kBidirectional}}},
  };
  for (const Round& r : rounds) {
    SCOPED_TRACE(testing::Message() << "heads " << r.heads << "/" << r.kv << " d " << r.d);
    int keys = 0;
    for (const SeqCase& c : r.cases) keys += c.n_cache + c.n_q + 64;
    Pool pool(r.heads, r.kv, r.d, 16, keys / 16 + 16, rng);
    std::vector<Seq> seqs;
    for (const SeqCase& c : r.cases) seqs.push_back(make_seq(c, pool, rng));
    pool.upload_positions();
    std::vector<const Seq*> all;
    for (const Seq& s : seqs) all.push_back(&s);
    const HandOver plain = run_hand_over(pool, all);
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i].prefix_lse = i % 3 != 1;
    const HandOver with = run_hand_over(pool, all);
    EXPECT_GT(with.plan.need.prefix_rows, 0);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Seq& s = seqs[i];
      SCOPED_TRACE(testing::Message() << "sequence " << i << ": " << s.c.n_q << " queries, "
                                      << s.c.n_cache << " cached, splits " << with.plan.splits[i]);
      expect_matches_reference(s, with.out[i], "with the hand-over");
      EXPECT_TRUE(with.out[i] == plain.out[i]) << "the hand-over changed the output bits";
      if (!s.prefix_lse) continue;
      const auto& got = with.lse[i];
      ASSERT_EQ(got.size(), s.ref_prefix_lse.size());
      for (size_t e = 0; e < got.size(); ++e) {
        const double want = s.ref_prefix_lse[e];
        if (std::isinf(want))
          EXPECT_EQ(got[e], -INFINITY) << "row " << e / r.heads << " sees no cache key";
        else
          EXPECT_NEAR(got[e], want, 2e-4 * std::max(1.0, std::abs(want)))
              << "row " << e / r.heads << " head " << e % r.heads;
      }
      const HandOver alone = run_hand_over(pool, {&s});
      EXPECT_TRUE(alone.lse[0] == got) << "batched LSE != alone";
    }
  }
}

// Whether two top-k sets of KV head h are equal; where not, each key in one only must tie the
// k-th largest of `own` (the scores `b` was ranked from) within fp32 rounding, and at most one
// pair swaps.
bool same_set_but_near_ties(const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                            std::span<const float> own, int k, int h) {
  if (a == b) return true;
  std::vector<float> sorted(own.begin(), own.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[size_t(k - 1)];
  std::vector<int32_t> differ;
  std::set_symmetric_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(differ));
  EXPECT_LE(differ.size(), 2u) << "kv head " << h;
  for (int32_t j : differ)
    EXPECT_NEAR(own[size_t(j)], kth, 1e-5 * kth)
        << "kv head " << h << ": key " << j << " differs without a near-tie at the k-th";
  return false;
}

// same_set_but_near_ties over every KV head of two [kv][k] pick lists, `own` the [kv][n] score
// sums b was ranked from: how many heads' sets are identical.
int identical_sets(const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                   const std::vector<float>& own, int kv, int n, int k) {
  int equal = 0;
  for (int h = 0; h < kv; ++h) {
    const auto set = [&](const std::vector<int32_t>& picks) {
      return std::vector<int32_t>(picks.begin() + size_t(h) * k, picks.begin() + size_t(h + 1) * k);
    };
    equal += same_set_but_near_ties(set(a), set(b),
                                    std::span(own).subspan(size_t(h) * n, size_t(n)), k, h);
  }
  return equal;
}

// A selection over one sequence of the pool: heads / KV heads, head_dim, queries, cached keys,
// top-k and the selection's queries.
struct SelectCase {
  int heads, kv, d, n_q, n_cache, k, select;
  std::string name() const {
    return "heads " + std::to_string(heads) + "/" + std::to_string(kv) + " d " + std::to_string(d) +
           ", " + std::to_string(n_q) + " queries, " + std::to_string(n_cache) + " cached, k " +
           std::to_string(k) + ", select " + std::to_string(select);
  }
};

// Score-sum parameters over the pool's K for a prefix of n_cache keys at their positions in
// `pages` (the pool's pages of 16), selection rows `rows`, sums into `scores`; q and lse are
// the caller's.
cuda::ScoreSumParams pool_score_sums(const Pool& pool, int n_cache, const int32_t* pages,
                                     const int32_t* rows, int n_rows, float* scores) {
  cuda::ScoreSumParams sp;
  sp.k_cache = reinterpret_cast<const bf16*>(pool.dk.get());
  sp.prefix = {pages, 4};
  sp.rows_used = rows;
  sp.scores = scores;
  sp.n_rows_used = n_rows;
  sp.n_prefix = n_cache;
  sp.heads = pool.shape.heads;
  sp.kv_heads = pool.shape.kv_heads;
  sp.head_dim = pool.shape.head_dim;
  sp.scale = pool.shape.scale;
  return sp;
}

// The selection from the handed-over LSE (score sums, top-k) picks the very sets the selection's
// own LSE pass picks, on fresh random inputs: all of a block's queries and a few of them, both
// kernels, head_dim 128 / 64 / 16. The two LSEs agree to fp32 rounding (and with the host's
// double), so a set may differ only by a key tied with the k-th within that rounding.
TEST(CudaAttentionBatch, HandedOverLseSelectsTheSameSets) {
  std::mt19937 rng(106);
  int sets = 0, equal_sets = 0;
  for (const SelectCase c :
       {SelectCase{32, 8, 128, 32, 6000, 1024, 0}, SelectCase{32, 8, 128, 32, 3000, 256, 4},
        SelectCase{32, 8, 128, 8, 2000, 100, 0}, SelectCase{8, 2, 64, 32, 2500, 300, 0},
        SelectCase{32, 8, 16, 32, 4000, 512, 0}, SelectCase{4, 1, 16, 16, 1200, 64, 5}}) {
    SCOPED_TRACE(c.name());
    Pool pool(c.heads, c.kv, c.d, 16, (c.n_cache + c.n_q) / 16 + 16, rng);
    Seq s = make_seq({c.n_q, c.n_cache, AttentionKind::kBlockCausal, c.n_q}, pool, rng);
    pool.upload_positions();
    s.prefix_lse = true;
    std::vector<int32_t> staging;
    const cuda::AttentionBatchSeq desc = s.desc();
    const auto plan = cuda::attention_batch_plan({&desc, 1}, pool.shape, staging);
    BatchRun run(pool, plan.need, staging.size());
    run.stage({&s});
    cuda::attention_batch(run.p, nullptr);

    const std::vector<int32_t> rows = selection_query_rows(c.n_q, c.select);
    auto drows = test::to_device(rows);
    auto dpages = test::to_device(s.page_table);  // the prefix's keys sit at their positions
    cuda::DeviceBuffer<float> scores(size_t(c.kv) * c.n_cache, "scores");
    cuda::ScoreSumParams sp =
        pool_score_sums(pool, c.n_cache, dpages.get(), drows.get(), int(rows.size()), scores.get());
    sp.q = reinterpret_cast<const bf16*>(run.q.get());
    // Both ways to the LSE (rows not used stay NaN), then the same score sums and top-k.
    cuda::DeviceBuffer<int32_t> topk_ws(cuda::top_k_workspace_ints(c.n_cache, c.kv),
                                        "top-k workspace");
    std::vector<std::vector<float>> lses, sums;
    std::vector<std::vector<int32_t>> picks;
    for (const bool hand_over : {true, false}) {
      cuda::DeviceBuffer<float> lse(size_t(c.n_q) * c.heads, "lse");
      DLLM_CUDA_CHECK(cudaMemset(lse.get(), 0xff, lse.size() * sizeof(float)));
      if (hand_over) {
        cuda::mage_prefix_lse_from_attention(sp, run.prefix_ml.get() + plan.prefix_row[0] * 2,
                                             plan.splits[0], c.n_q, lse.get(), nullptr);
      } else {
        cuda::DeviceBuffer<float> ws(
            cuda::prefix_lse_workspace_floats(c.n_cache, int(rows.size()), c.heads, c.kv),
            "lse workspace");
        cuda::mage_prefix_lse(sp, lse.get(), ws.get(), nullptr);
        DLLM_CUDA_CHECK(cudaDeviceSynchronize());
      }
      sp.lse = lse.get();
      cuda::mage_score_sum(sp, nullptr);
      cuda::DeviceBuffer<int32_t> sel(size_t(c.kv) * c.k, "sets");
      cuda::sparse_top_k(scores.get(), c.n_cache, c.k, c.kv, sel.get(), topk_ws.get(), nullptr);
      lses.push_back(test::to_host(lse));
      sums.push_back(test::to_host(scores));
      picks.push_back(test::to_host(sel));
    }
    for (int32_t r : rows)
      for (int hq = 0; hq < c.heads; ++hq) {
        const size_t e = size_t(r) * c.heads + hq;
        EXPECT_NEAR(lses[0][e], lses[1][e], 1e-4 * std::max(1.0f, std::abs(lses[1][e])))
            << "row " << r << " head " << hq;
        EXPECT_NEAR(lses[0][e], s.ref_prefix_lse[e],
                    2e-4 * std::max(1.0, std::abs(s.ref_prefix_lse[e])))
            << "row " << r << " head " << hq;
      }
    // The same sets — but for a key whose score ties the k-th within the two LSEs' fp32 rounding
    // (~1e-6 relative), which either side may take; printed, and at most one per set.
    sets += c.kv;
    equal_sets += identical_sets(picks[0], picks[1], sums[1], c.kv, c.n_cache, c.k);
  }
  std::printf("  hand-over vs own LSE pass: %d of %d sets identical (others: a near-tie swap)\n",
              equal_sets, sets);
  EXPECT_EQ(sets, 8 + 8 + 8 + 2 + 8 + 1);
  EXPECT_GE(equal_sets, sets - 3);
}

// MAGE's few-query selection from the exact pass's raw scores (AttentionBatchSeq::
// score_queries): the scores every kernel hands over (the split kernels' consumers, the
// warp-specialised kernel's producer) equal the host's q . k over the prefix (one and many
// splits, head_dim 128 / 64 / 16, two sequences of a batch with queries of their own, GQA 7 with
// a query's rows across two row blocks), the outputs keep their bits, and the score sums read
// from them equal those of the pass over K on the same LSE up to fp32 summation order — so the
// same sets, but for a near-tie at the k-th.
TEST(CudaAttentionBatch, HandedOverScoresSumAsThePassOverKeys) {
  std::mt19937 rng(107);
  int sets = 0, equal_sets = 0, equal_sets_own_lse = 0, multi_split = 0;
  for (const SelectCase c :
       {SelectCase{32, 8, 128, 32, 6000, 512, 1}, SelectCase{32, 8, 128, 32, 20000, 1024, 4},
        SelectCase{32, 8, 128, 8, 3000, 256, 2}, SelectCase{8, 2, 64, 32, 2500, 300, 3},
        SelectCase{32, 8, 16, 32, 4000, 512, 1}, SelectCase{4, 1, 16, 16, 1200, 64, 4},
        SelectCase{28, 4, 128, 37, 20000, 1024, 1}}) {
    SCOPED_TRACE(c.name());
    const int group = c.heads / c.kv;
    Pool pool(c.heads, c.kv, c.d, 16, (2 * c.n_cache + 2 * c.n_q) / 16 + 32, rng);
    Seq s = make_seq({c.n_q, c.n_cache, AttentionKind::kBlockCausal, c.n_q}, pool, rng);
    Seq other = make_seq({c.n_q, c.n_cache / 2 + 7, AttentionKind::kBlockCausal, c.n_q}, pool, rng);
    pool.upload_positions();
    const HandOver plain = run_hand_over(pool, {&s, &other});
    s.prefix_lse = other.prefix_lse = true;
    s.score_queries = selection_query_rows(c.n_q, c.select);
    other.score_queries = selection_query_rows(c.n_q, std::max(1, c.select - 1));
    const HandOver with = run_hand_over(pool, {&s, &other});
    // The scores alone (MAGE's few rows: their lse from the scores), the kernels' other instance.
    s.prefix_lse = other.prefix_lse = false;
    const HandOver scores_only = run_hand_over(pool, {&s, &other});
    s.prefix_lse = other.prefix_lse = true;
    multi_split += with.plan.splits[0] > 1;
    for (const Seq* q : {&s, &other}) {
      const size_t i = q == &s ? 0 : 1;
      EXPECT_TRUE(with.out[i] == plain.out[i]) << "sequence " << i << ": the scores changed bits";
      EXPECT_TRUE(scores_only.out[i] == plain.out[i]) << "sequence " << i << ": scores alone";
      EXPECT_TRUE(scores_only.scores[i] == with.scores[i]) << "sequence " << i << ": scores alone";
      const int n = q->c.n_cache, rows = int(q->score_queries.size()) * group;
      const int64_t stride = cuda::batch_layout::prefix_score_stride(n);
      ASSERT_EQ(with.scores[i].size(), size_t(c.kv) * rows * stride);
      double worst = 0;
      for (int h = 0; h < c.kv; ++h)
        for (int t = 0; t < rows; ++t) {
          const int r = q->score_queries[size_t(t / group)], hq = h * group + t % group;
          const float* qr = &q->q[(size_t(r) * c.heads + hq) * c.d];
          for (int j = 0; j < n; ++j) {
            const float* kr = &pool.k[size_t(q->phys[size_t(j)]) * c.kv * c.d + size_t(h) * c.d];
            double dot = 0;
            for (int e = 0; e < c.d; ++e) dot += double(qr[e]) * kr[e];
            const double got = with.scores[i][(size_t(h) * rows + t) * stride + j];
            worst = std::max(worst, std::abs(got - dot) / (1.0 + std::abs(dot)));
          }
        }
      EXPECT_LE(worst, 1e-5) << "sequence " << i << ": raw scores vs the host's q . k";
    }
    // The score sums of s from its handed-over scores and from a pass over K, on the same LSE.
    const int n = c.n_cache;
    auto drows = test::to_device(s.score_queries);
    auto dpages = test::to_device(s.page_table);
    auto dq = test::to_device(s.qb);
    auto dlse = test::to_device(with.lse[0]);
    auto draw = test::to_device(with.scores[0]);
    auto dml = test::to_device(with.prefix_ml);
    cuda::DeviceBuffer<float> scores(size_t(c.kv) * n, "scores");
    cuda::ScoreSumParams sp = pool_score_sums(pool, n, dpages.get(), drows.get(),
                                              int(s.score_queries.size()), scores.get());
    sp.q = reinterpret_cast<const bf16*>(dq.get());
    sp.lse = dlse.get();
    cuda::DeviceBuffer<int32_t> topk_ws(cuda::top_k_workspace_ints(n, c.kv), "top-k workspace");
    std::vector<std::vector<float>> sums;
    std::vector<std::vector<int32_t>> picks;
    // From the scores with the hand-over's lse merged in the sums and read (SparseD's), then
    // over K, then with the lse from the scores themselves (the forward's MAGE).
    cuda::HandedScores hs;
    hs.raw = draw.get();
    hs.stride = cuda::batch_layout::prefix_score_stride(n);
    cuda::DeviceBuffer<float> score_ml(
        cuda::prefix_ml_from_scores_floats(n, int(s.score_queries.size()), c.heads), "ml");
    for (const int way : {0, 1, 2, 3}) {
      DLLM_CUDA_CHECK(cudaMemset(scores.get(), 0xff, scores.size() * sizeof(float)));
      hs.prefix_ml = way == 0 ? dml.get() + with.plan.prefix_row[0] * 2 : nullptr;
      hs.splits = with.plan.splits[0];
      hs.n_q = c.n_q;
      hs.ml_of_used_rows = false;
      if (way == 3) {
        cuda::mage_prefix_ml_from_scores(sp, hs, score_ml.get(), nullptr);
        hs.prefix_ml = score_ml.get();
        hs.splits = cuda::prefix_ml_chunks(n);
        hs.ml_of_used_rows = true;
      }
      if (way != 2)
        cuda::mage_score_sum_from_scores(sp, hs, nullptr);
      else
        cuda::mage_score_sum(sp, nullptr);
      cuda::DeviceBuffer<int32_t> sel(size_t(c.kv) * c.k, "sets");
      cuda::sparse_top_k(scores.get(), n, c.k, c.kv, sel.get(), topk_ws.get(), nullptr);
      sums.push_back(test::to_host(scores));
      picks.push_back(test::to_host(sel));
    }
    EXPECT_EQ(sums[0], sums[1]) << "the lse merged in the sums != the merge kernel's";
    EXPECT_LE(rel_error(sums[0], sums[2]), 1e-5) << "score sums from the scores vs over K";
    EXPECT_LE(rel_error(sums[3], sums[2]), 1e-5) << "lse from the scores: sums vs over K";
    sets += c.kv;
    equal_sets += identical_sets(picks[0], picks[2], sums[2], c.kv, n, c.k);
    equal_sets_own_lse += identical_sets(picks[3], picks[2], sums[2], c.kv, n, c.k);
  }
  std::printf(
      "  scores handed over vs a pass over K: %d of %d sets identical (lse from the scores: "
      "%d)\n",
      equal_sets, sets, equal_sets_own_lse);
  EXPECT_GE(equal_sets, sets - 3);
  EXPECT_GE(equal_sets_own_lse, sets - 3);
  EXPECT_GT(multi_split, 2) << "the cases must cover sequences of several splits";
}

// Bad plans are refused with the field at fault.
TEST(CudaAttentionBatch, PlannerRejectsBadInput) {
  cuda::AttentionBatchShape s{8, 2, 128, 16, 1024, 0.1f};
  std::vector<int32_t> staging;
  const std::vector<int32_t> pages = {3, 70};  // page 70 is past the pool (64 pages)
  cuda::AttentionBatchSeq q;
  q.n_q = 4;
  q.n_keys = 20;
  q.page_table = pages;
  EXPECT_THROW(cuda::attention_batch_plan({&q, 1}, s, staging), Error);
  q.n_keys = 3;  // fewer keys than queries
  EXPECT_THROW(cuda::attention_batch_plan({&q, 1}, s, staging), Error);
  s.page_size = 12;
  q.n_keys = 8;
  EXPECT_THROW(cuda::attention_batch_plan({&q, 1}, s, staging), Error);
  s.page_size = 16;
  q.n_keys = 20;
  q.page_table = {};
  const std::vector<int32_t> unordered = {2, 1};
  q.score_queries = unordered;
  EXPECT_THROW(cuda::attention_batch_plan({&q, 1}, s, staging), Error);  // not ascending
  q.prefix_lse = true;
  EXPECT_THROW(cuda::attention_batch_plan({&q, 1}, s, staging), Error);
  const std::vector<int32_t> past = {1, 4};
  q.score_queries = past;
  EXPECT_THROW(cuda::attention_batch_plan({&q, 1}, s, staging), Error);  // past the queries
  q.n_q = 5;
  const std::vector<int32_t> too_many = {0, 1, 2, 3, 4};  // x 4 query heads: 20 score rows > 16
  q.score_queries = too_many;
  EXPECT_THROW(cuda::attention_batch_plan({&q, 1}, s, staging), Error);
  q.score_queries = {too_many.data(), 4};
  EXPECT_NO_THROW(cuda::attention_batch_plan({&q, 1}, s, staging));
}

}  // namespace
}  // namespace dllm
