// MAGE (and SparseD) sparse attention in the CUDA forward (backend/cuda/cuda_sparse.cpp) against
// the CPU reference (backend/cpu/cpu_sparse.cpp, itself checked against NumPy): the selected
// sets, the gathered attention's logits on the same sets and on each backend's own, k >= N exact
// to the bit, a sparse sequence batched with others equal to alone, graph replays equal to direct
// launches, the selection stream equal to the main one, and greedy generation in lockstep with
// the CPU. Selection and k >= N also on a LLaDA2.x-shaped model (fused QKV, partial RoPE, MoE),
// and LLaDA2.x generations with MAGE / SparseD against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <numeric>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"
#include "decode/decoder.h"
#include "engine/engine_core.h"
#include "io/json_file.h"
#include "model/random_model.h"
#include "support/decision_trace.h"
#include "support/sparse_fixture_params.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using test::rel_error;

// An SDAR-shaped random model: head_dim 128, GQA 4, three layers (layer 0 exact).
std::unique_ptr<Model> random_sdar(int head_dim) {
  const nlohmann::json config = {{"architectures", {"SDARForCausalLM"}},
                                 {"model_type", "sdar"},
                                 {"vocab_size", 3000},
                                 {"hidden_size", 512},
                                 {"intermediate_size", 768},
                                 {"num_hidden_layers", 3},
                                 {"num_attention_heads", 512 / head_dim},
                                 {"num_key_value_heads", 512 / head_dim / 4},
                                 {"head_dim", head_dim},
                                 {"rms_norm_eps", 1e-6},
                                 {"rope_theta", 1000000.0},
                                 {"tie_word_embeddings", true},
                                 {"mask_token_id", 2999},
                                 {"block_size", 32}};
  return make_random_model(config, 11);
}

// A LLaDA2-shaped random model of the same sizes (fused QKV, per-head q/k RMSNorm, partial RoPE
// over half the head, MoE layers after the first): the sparse path must not care. Every token
// takes all 4 experts (one group): a random router's top-k margins can be within bf16 rounding,
// and a routing flip between the GPU and the CPU changes a row by tens of percent, which is not
// what these tests are about (H100, 2026-11-25, 16 experts / top 4: one case's later step
// differed by 0.21 on the same sets — a flip is the suspect; the exact GPU-vs-CPU check of that
// step below now tells such a difference from the sparse path's). The router weights, the
// normalisation and the shared expert still run.
std::unique_ptr<Model> random_llada2(int head_dim) {
  const nlohmann::json config = {{"architectures", {"LLaDA2MoeModelLM"}},
                                 {"model_type", "llada2_moe"},
                                 {"vocab_size", 3000},
                                 {"hidden_size", 512},
                                 {"intermediate_size", 768},
                                 {"num_hidden_layers", 3},
                                 {"num_attention_heads", 512 / head_dim},
                                 {"num_key_value_heads", 512 / head_dim / 4},
                                 {"head_dim", head_dim},
                                 {"partial_rotary_factor", 0.5},
                                 {"rms_norm_eps", 1e-6},
                                 {"rope_theta", 600000.0},
                                 {"use_qk_norm", true},
                                 {"tie_word_embeddings", false},
                                 {"num_experts", 4},
                                 {"num_experts_per_tok", 4},
                                 {"num_shared_experts", 1},
                                 {"moe_intermediate_size", 128},
                                 {"first_k_dense_replace", 1},
                                 {"n_group", 1},
                                 {"topk_group", 1},
                                 {"score_function", "sigmoid"},
                                 {"moe_router_enable_expert_bias", true},
                                 {"routed_scaling_factor", 2.5},
                                 {"norm_topk_prob", true},
                                 {"eos_token_id", 2998},
                                 {"mask_token_id", 2999}};
  return make_random_model(config, 12);
}

std::unique_ptr<Model> random_model(bool llada2, int head_dim) {
  return llada2 ? random_llada2(head_dim) : random_sdar(head_dim);
}

constexpr int32_t kMask = 2999;

// One sequence on one backend: its cache and method state.
struct Seq {
  Backend* backend = nullptr;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<MethodState> state;

  SequenceForward request(std::vector<int32_t> ids, int32_t pos0, int32_t block) const {
    SequenceForward f;
    f.cache = cache.get();
    f.state = state.get();
    f.tokens = std::move(ids);
    f.positions.resize(f.tokens.size());
    std::iota(f.positions.begin(), f.positions.end(), pos0);
    f.rule = AttentionRule::block_causal(block);
    f.want_logits = true;
    f.output_rows.resize(f.tokens.size());
    std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
    return f;
  }
  SequenceResult run(const SequenceForward& f) const {
    return backend->forward(std::span(&f, 1))[0];
  }
};

Seq prefilled(Backend& b, int n_prefix, int capacity) {
  Seq s;
  s.backend = &b;
  s.cache = b.create_cache(capacity);
  s.state = b.create_method_state();
  std::vector<int32_t> ids(static_cast<size_t>(n_prefix));
  for (int i = 0; i < n_prefix; ++i) ids[size_t(i)] = (i * 7919 + 13) % 2990;
  SequenceForward pre = s.request(ids, 0, 32);
  pre.write = CacheWrite::kAppend;
  pre.want_logits = false;
  pre.output_rows.clear();
  s.run(pre);
  return s;
}

SparseStep mage_select(int k, int exact_layers, int select_queries = 0,
                       SparseMethod method = SparseMethod::kMage) {
  SparseStep s;
  s.select = method;
  s.k = k;
  s.exact_layers = exact_layers;
  s.select_queries = select_queries;
  s.want_selection = true;
  return s;
}

SparseStep mage_attend(int k, int exact_layers) {
  SparseStep s;
  s.k = k;
  s.exact_layers = exact_layers;
  s.attend_selected = true;
  return s;
}

std::vector<int32_t> later_block(int n) {
  std::vector<int32_t> b(static_cast<size_t>(n), kMask);
  for (int i = 0; i < n; i += 3) b[size_t(i)] = (i * 31 + 7) % 2990;
  return b;
}

// Two selections of sequence s by two ways to the same numbers: each set equal, or (a key tied
// with the k-th within rounding) one swapped pair; counts the sets compared and the identical.
void compare_sets(const SequenceResult& a, const SequenceResult& b, size_t s, int& compared,
                  int& identical) {
  ASSERT_EQ(a.sparse_selection.size(), b.sparse_selection.size());
  for (size_t i = 0; i < a.sparse_selection.size(); ++i) {
    const auto &x = a.sparse_selection[i].slots, &y = b.sparse_selection[i].slots;
    ASSERT_EQ(x.size(), y.size());
    if (x.empty()) continue;
    ++compared;
    identical += x == y;
    std::vector<int32_t> differ;
    std::set_symmetric_difference(x.begin(), x.end(), y.begin(), y.end(),
                                  std::back_inserter(differ));
    EXPECT_LE(differ.size(), 2u) << "sequence " << s << " set " << i << ": more than a swap";
  }
}

double recall(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  std::vector<int32_t> common;
  std::set_intersection(got.begin(), got.end(), want.begin(), want.end(),
                        std::back_inserter(common));
  return double(common.size()) / double(want.size());
}

// The selection (MAGE: prefix-only softmax of the chosen queries; SparseD: every query's softmax
// over every key it sees), and the gathered attention on the GPU's own sets against the CPU on
// the very same sets (tight: only bf16 differs) and on its own (end to end). Block 32 at head_dim
// 128 takes the Hopper kernel (128 rows per KV head), block 8 the mma.sync one, head_dim 64 both
// again; head_dim 16 is the embedded models' (32 heads, 8 KV heads here). The last two cases are
// LLaDA2.x-shaped (fused QKV, partial RoPE, MoE); the SDAR case before them has the shape of the
// last (head_dim 64, block 8: 32 rows per KV head on mma.sync), so that a failure there tells a
// kernel shape from the family.
TEST(CudaMage, SelectionAndGatheredAttentionMatchCpu) {
  struct Case {
    int head_dim, block, n_prefix, k, select_queries;
    bool llada2 = false;
  };
  for (const SparseMethod method : {SparseMethod::kMage, SparseMethod::kSparseD})
    for (const Case cs :
         {Case{128, 32, 1000, 64, 0}, Case{128, 8, 1000, 64, 0}, Case{64, 32, 700, 100, 5},
          Case{64, 4, 333, 40, 0}, Case{16, 32, 600, 64, 0}, Case{64, 8, 700, 100, 5},
          Case{128, 32, 1000, 64, 0, true}, Case{64, 8, 700, 100, 5, true}}) {
      SCOPED_TRACE(to_string(method) + (cs.llada2 ? " llada2" : " sdar") + " head_dim " +
                   std::to_string(cs.head_dim) + " block " + std::to_string(cs.block) + " N " +
                   std::to_string(cs.n_prefix));
      auto model = random_model(cs.llada2, cs.head_dim);
      auto gpu = make_cuda_backend(*model);
      auto cpu = make_cpu_backend(*model);
      const int64_t layers = model->config().num_layers, hkv = model->config().num_kv_heads;
      Seq g = prefilled(*gpu, cs.n_prefix, cs.n_prefix + 64),
          c = prefilled(*cpu, cs.n_prefix, cs.n_prefix + 64);
      const std::vector<int32_t> masks(size_t(cs.block), kMask);
      SequenceForward sg = g.request(masks, cs.n_prefix, 32),
                      sc = c.request(masks, cs.n_prefix, 32);
      sg.sparse = sc.sparse = mage_select(cs.k, 1, cs.select_queries, method);
      const SequenceResult rg = g.run(sg), rc = c.run(sc);
      EXPECT_LE(rel_error(rg.logits, rc.logits), 2e-2) << "the selecting step is exact attention";
      ASSERT_EQ(rg.sparse_selection.size(), size_t(layers * hkv));
      double worst = 1.0, mean = 0;
      for (int64_t i = 0; i < layers * hkv; ++i) {
        const SparseSet &a = rg.sparse_selection[size_t(i)], &b = rc.sparse_selection[size_t(i)];
        EXPECT_EQ(a.prefix, b.prefix) << i;
        EXPECT_EQ(a.dense, b.dense) << i;
        if (i < hkv) {  // layer 0 is exact: no set
          EXPECT_TRUE(a.slots.empty());
          continue;
        }
        ASSERT_EQ(a.slots.size(), size_t(cs.k)) << i;
        EXPECT_TRUE(std::is_sorted(a.slots.begin(), a.slots.end()));
        const double r = recall(a.slots, b.slots);
        worst = std::min(worst, r);
        mean += r / double((layers - 1) * hkv);
      }
      std::printf("  GPU vs CPU selection recall: mean %.4f, worst set %.4f (random: %.3f)\n", mean,
                  worst, double(cs.k) / cs.n_prefix);
      // The GPU scores bf16 queries and keys of a bf16 model, the CPU fp32 ones in double: keys
      // near the k-th score may swap (a random model's averaged attention is nearly flat). The
      // score and top-k kernels themselves match the CPU on the same inputs (CudaSparseSelect.*).
      EXPECT_GE(mean, 0.75);
      EXPECT_GE(worst, 0.5);

      const auto block = later_block(cs.block);
      SequenceForward ag = g.request(block, cs.n_prefix, 32),
                      ac = c.request(block, cs.n_prefix, 32);
      ag.sparse = ac.sparse = mage_attend(cs.k, 1);
      const auto gpu_sparse = g.run(ag).logits;
      const auto cpu_own_sets = c.run(ac).logits;
      // The CPU on the GPU's sets.
      auto& cpu_state = static_cast<cpu_backend::CpuMethodState&>(*c.state);
      cpu_state.sparse_sets = rg.sparse_selection;
      const auto cpu_gpu_sets = c.run(ac).logits;
      const auto gpu_exact = g.run(g.request(block, cs.n_prefix, 32)).logits;
      // The same step exact on both backends: whatever differs beyond this is the sparse path's.
      const double exact_vs_cpu =
          rel_error(gpu_exact, c.run(c.request(block, cs.n_prefix, 32)).logits);
      EXPECT_LE(exact_vs_cpu, 2e-2) << "exact attention of the later step, GPU vs CPU";
      const double same_sets = rel_error(gpu_sparse, cpu_gpu_sets);
      const double own_sets = rel_error(gpu_sparse, cpu_own_sets);
      const double vs_exact = rel_error(gpu_sparse, gpu_exact);
      std::printf(
          "  sparse logits rel. error: vs CPU on the same sets %.2e, on its own sets %.2e; "
          "GPU sparse vs GPU exact %.2e (exact GPU vs CPU %.2e)\n",
          same_sets, own_sets, vs_exact, exact_vs_cpu);
      EXPECT_LE(same_sets, 2e-2);
      // Against the CPU's own sets the bf16 selection may swap a few keys near the k-th score
      // (H100, 2026-11-25: recall 0.975-1.0, own-set errors 0.4-3.7e-2 where the same sets give
      // 3.6-3.9e-3): the attention given the sets is checked above, the sets by recall.
      EXPECT_LE(own_sets, 5e-2);
      EXPECT_GT(vs_exact, 3 * same_sets) << "the selection must matter";
    }
}

// k >= N: the selecting and the attending forward are exact attention, bit for bit (SDAR and
// LLaDA2.x shapes).
TEST(CudaMage, BudgetCoveringThePrefixIsExactBitForBit) {
  for (const bool llada2 : {false, true}) {
    SCOPED_TRACE(llada2 ? "llada2" : "sdar");
    auto model = random_model(llada2, 128);
    auto gpu = make_cuda_backend(*model);
    Seq g = prefilled(*gpu, 200, 300);
    const std::vector<int32_t> masks(32, kMask);
    const auto exact_sel = g.run(g.request(masks, 200, 32)).logits;
    SequenceForward sel = g.request(masks, 200, 32);
    sel.sparse = mage_select(200, 1);
    const auto r = g.run(sel);
    EXPECT_EQ(r.logits, exact_sel);
    const size_t hkv = size_t(model->config().num_kv_heads);
    ASSERT_EQ(r.sparse_selection.size(), 3 * hkv);
    for (size_t i = hkv; i < r.sparse_selection.size(); ++i) {  // layer 0 is exact
      EXPECT_TRUE(r.sparse_selection[i].dense);
      EXPECT_EQ(r.sparse_selection[i].prefix, 200);
    }
    const auto block = later_block(32);
    const auto exact = g.run(g.request(block, 200, 32)).logits;
    SequenceForward att = g.request(block, 200, 32);
    att.sparse = mage_attend(200, 1);
    EXPECT_EQ(g.run(att).logits, exact);
  }
}

// A selecting sequence, an attending one and an exact one in one forward: each gets what it gets
// alone, to the bit (selection included), and the sets they store are the same.
TEST(CudaMage, BatchedWithDenseSequencesEqualsAlone) {
  auto model = random_sdar(128);
  auto gpu = make_cuda_backend(*model);
  const std::vector<int32_t> masks(32, kMask);
  const auto block = later_block(32);
  // Three sequences, twice: once run alone, once batched.
  auto make = [&](std::vector<Seq>& seqs) {
    for (int n : {900, 500, 700}) seqs.push_back(prefilled(*gpu, n, n + 64));
    // Sequence 1 attends through sets selected beforehand.
    SequenceForward sel = seqs[1].request(masks, 500, 32);
    sel.sparse = mage_select(64, 1);
    seqs[1].run(sel);
  };
  auto forwards = [&](std::vector<Seq>& seqs) {
    std::vector<SequenceForward> f;
    f.push_back(seqs[0].request(masks, 900, 32));
    f[0].sparse = mage_select(64, 1);
    f.push_back(seqs[1].request(block, 500, 32));
    f[1].sparse = mage_attend(64, 1);
    f.push_back(seqs[2].request(block, 700, 32));  // exact
    return f;
  };
  std::vector<Seq> alone, together;
  make(alone);
  make(together);
  const auto fa = forwards(alone), ft = forwards(together);
  std::vector<SequenceResult> ra;
  for (const SequenceForward& f : fa) ra.push_back(gpu->forward(std::span(&f, 1))[0]);
  const auto rt = gpu->forward(ft);
  for (size_t i = 0; i < fa.size(); ++i) {
    EXPECT_EQ(rt[i].logits, ra[i].logits) << "sequence " << i;
    ASSERT_EQ(rt[i].sparse_selection.size(), ra[i].sparse_selection.size());
    for (size_t s = 0; s < rt[i].sparse_selection.size(); ++s)
      EXPECT_EQ(rt[i].sparse_selection[s].slots, ra[i].sparse_selection[s].slots);
  }
  // The stored sets drive the next step alike: sequence 0 attends, batched and alone.
  SequenceForward na = alone[0].request(block, 900, 32), nt = together[0].request(block, 900, 32);
  na.sparse = nt.sparse = mage_attend(64, 1);
  SequenceForward dense = together[2].request(block, 700, 32);
  std::vector<SequenceForward> pair = {dense, nt};
  EXPECT_EQ(gpu->forward(pair)[1].logits, alone[0].run(na).logits);
  // The selection matters: sequence 1 attended exactly gives other logits.
  EXPECT_NE(rt[1].logits, together[1].run(together[1].request(block, 500, 32)).logits);
}

// Selecting sequences whose sparse layers start at different layers (or never: exact layers = the
// model's layers) share a batch: each one's score sums of every layer and its one top-k after the
// last run on one selection lane, and its sets and logits are those it gets alone.
TEST(CudaMage, SelectionsFromDifferentExactLayersEqualAlone) {
  auto model = random_sdar(128);
  auto gpu = make_cuda_backend(*model);
  const std::vector<int32_t> masks(32, kMask);
  // The first sequence starts selecting a layer later; the third keeps every layer exact.
  const int exact[] = {2, 1, 3, 1};
  const int lengths[] = {900, 600, 700, 800};
  auto make = [&](std::vector<Seq>& seqs, std::vector<SequenceForward>& f) {
    for (int i = 0; i < 4; ++i) {
      seqs.push_back(prefilled(*gpu, lengths[i], lengths[i] + 64));
      f.push_back(seqs.back().request(masks, lengths[i], 32));
      f.back().sparse = mage_select(64 + 32 * i, exact[i]);
    }
  };
  std::vector<Seq> alone, together;
  std::vector<SequenceForward> fa, ft;
  make(alone, fa);
  make(together, ft);
  const auto rt = gpu->forward(ft);
  for (size_t i = 0; i < fa.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "sequence " << i);
    const SequenceResult ra = gpu->forward(std::span(&fa[i], 1))[0];
    EXPECT_EQ(rt[i].logits, ra.logits);
    ASSERT_EQ(rt[i].sparse_selection.size(), ra.sparse_selection.size());
    size_t selected = 0;
    for (size_t s = 0; s < ra.sparse_selection.size(); ++s) {
      EXPECT_EQ(rt[i].sparse_selection[s].slots, ra.sparse_selection[s].slots) << "set " << s;
      selected += ra.sparse_selection[s].slots.size();
    }
    // Layers past the exact ones hold k slots for every KV head.
    const size_t kv_heads = model->config().num_kv_heads;
    EXPECT_EQ(selected, (3 - exact[i]) * kv_heads * (64 + 32 * i));
  }
}

// Attending steps replayed from captured graphs (growing context: one committed block between
// steps) equal direct launches.
TEST(CudaMage, GraphReplayEqualsDirectLaunches) {
  auto model = random_sdar(128);
  setenv("DLLM_CUDA_GRAPHS", "0", 1);
  auto direct = make_cuda_backend(*model);
  unsetenv("DLLM_CUDA_GRAPHS");
  auto graphed = make_cuda_backend(*model);
  Seq d = prefilled(*direct, 600, 800), g = prefilled(*graphed, 600, 800);
  const std::vector<int32_t> masks(32, kMask);
  int pos = 600;
  for (int blk = 0; blk < 2; ++blk) {
    for (Seq* s : {&d, &g}) {
      SequenceForward sel = s->request(masks, pos, 32);
      sel.sparse = mage_select(64, 1);
      s->run(sel);
    }
    for (int step = 0; step < 4; ++step) {
      auto block = later_block(32);
      block[size_t(step)] = 100 + step;
      SequenceForward a = d.request(block, pos, 32), b = g.request(block, pos, 32);
      a.sparse = b.sparse = mage_attend(64, 1);
      EXPECT_EQ(d.run(a).logits, g.run(b).logits) << "block " << blk << " step " << step;
    }
    // The commit forward: sparse with the block's set, appending the block.
    for (Seq* s : {&d, &g}) {
      SequenceForward commit = s->request(later_block(32), pos, 32);
      commit.sparse = mage_attend(64, 1);
      commit.write = CacheWrite::kAppend;
      s->run(commit);
    }
    pos += 32;
  }
}

// The selection on its own stream (the default) selects what it selects on the main stream.
TEST(CudaMage, SideStreamSelectionEqualsMainStream) {
  auto model = random_sdar(64);
  setenv("DLLM_MAGE_SIDE_STREAM", "0", 1);
  auto main_only = make_cuda_backend(*model);
  unsetenv("DLLM_MAGE_SIDE_STREAM");
  auto side = make_cuda_backend(*model);
  Seq a = prefilled(*main_only, 800, 900), b = prefilled(*side, 800, 900);
  const std::vector<int32_t> masks(32, kMask);
  SequenceForward fa = a.request(masks, 800, 32), fb = b.request(masks, 800, 32);
  fa.sparse = fb.sparse = mage_select(96, 1);
  const auto ra = a.run(fa), rb = b.run(fb);
  EXPECT_EQ(ra.logits, rb.logits);
  ASSERT_EQ(ra.sparse_selection.size(), rb.sparse_selection.size());
  for (size_t i = 0; i < ra.sparse_selection.size(); ++i)
    EXPECT_EQ(ra.sparse_selection[i].slots, rb.sparse_selection[i].slots) << i;
  SequenceForward ga = a.request(later_block(32), 800, 32),
                  gb = b.request(later_block(32), 800, 32);
  ga.sparse = gb.sparse = mage_attend(96, 1);
  EXPECT_EQ(a.run(ga).logits, b.run(gb).logits);
}

// The exact pass's hand-over of the prefix-only LSE (method-specs §1.6, the default) selects
// the sets the selection's own pass over K selects (DLLM_MAGE_LSE_HANDOVER=0), and the selecting
// step's logits keep their bits: MAGE and SparseD, the Hopper kernel (block 32 at head_dim 128)
// and mma.sync (block 8; head_dim 16), all queries and a few, a batch of two. The two LSEs
// differ by fp32 rounding only, so a set may differ by a key tied with the k-th within it (a
// random model's averaged attention is nearly flat); the scores themselves are compared in
// CudaAttentionBatch.HandedOverLseSelectsTheSameSets.
TEST(CudaMage, LseHandOverSelectsAsTheSelectionsOwnPass) {
  struct Case {
    int head_dim, block, n_prefix, k, select_queries;
  };
  int compared = 0, identical = 0;
  for (const SparseMethod method : {SparseMethod::kMage, SparseMethod::kSparseD})
    for (const Case cs : {Case{128, 32, 3000, 256, 0}, Case{128, 8, 1500, 64, 0},
                          Case{16, 32, 2000, 128, 0}, Case{64, 32, 900, 100, 4}}) {
      SCOPED_TRACE(to_string(method) + " head_dim " + std::to_string(cs.head_dim) + " block " +
                   std::to_string(cs.block));
      auto model = random_sdar(cs.head_dim);
      setenv("DLLM_MAGE_LSE_HANDOVER", "0", 1);
      auto own = make_cuda_backend(*model);
      unsetenv("DLLM_MAGE_LSE_HANDOVER");
      auto handed = make_cuda_backend(*model);
      // Two sequences per backend, batched: one selecting, one of a shorter prefix selecting too.
      Seq a1 = prefilled(*own, cs.n_prefix, cs.n_prefix + 64),
          a2 = prefilled(*own, cs.n_prefix / 2, cs.n_prefix + 64),
          b1 = prefilled(*handed, cs.n_prefix, cs.n_prefix + 64),
          b2 = prefilled(*handed, cs.n_prefix / 2, cs.n_prefix + 64);
      const std::vector<int32_t> masks(size_t(cs.block), kMask);
      std::vector<SequenceForward> fa = {a1.request(masks, cs.n_prefix, 32),
                                         a2.request(masks, cs.n_prefix / 2, 32)};
      std::vector<SequenceForward> fb = {b1.request(masks, cs.n_prefix, 32),
                                         b2.request(masks, cs.n_prefix / 2, 32)};
      for (auto* v : {&fa, &fb})
        for (SequenceForward& f : *v) f.sparse = mage_select(cs.k, 1, cs.select_queries, method);
      const auto ra = own->forward(fa), rb = handed->forward(fb);
      for (size_t s = 0; s < 2; ++s) {
        EXPECT_EQ(ra[s].logits, rb[s].logits) << "sequence " << s;
        compare_sets(ra[s], rb[s], s, compared, identical);
      }
    }
  std::printf("  hand-over vs own LSE pass: %d of %d sets identical\n", identical, compared);
  EXPECT_GT(compared, 0);
  EXPECT_GE(identical, compared * 9 / 10);
}

// Selecting from a few queries, the exact pass hands their raw prefix scores over too (the
// default) and the score sums read them instead of K (DLLM_MAGE_SCORE_HANDOVER=0): the same sets
// but for a key tied with the k-th within fp32 rounding, the same logits; with the selection on
// the main stream (DLLM_MAGE_SIDE_STREAM=0) the same bits, and so with one score slot
// (DLLM_MAGE_SCORE_SLOTS=1: each layer's attention waits for the sums of the layer before). The
// Hopper kernel (block 32, head_dim 128) and mma.sync (block 8; head_dim 16 and 64), one to four
// queries, a batch of two; the scores themselves are checked in
// CudaAttentionBatch.HandedOverScoresSumAsThePassOverKeys.
TEST(CudaMage, ScoreHandOverSelectsAsThePassOverKeys) {
  struct Case {
    int head_dim, block, n_prefix, k, select_queries;
  };
  int compared = 0, identical = 0;
  for (const Case cs : {Case{128, 32, 3000, 256, 1}, Case{128, 8, 1500, 64, 2},
                        Case{16, 32, 2000, 128, 4}, Case{64, 32, 900, 100, 3}}) {
    SCOPED_TRACE("head_dim " + std::to_string(cs.head_dim) + " block " + std::to_string(cs.block) +
                 " queries " + std::to_string(cs.select_queries));
    auto model = random_sdar(cs.head_dim);
    setenv("DLLM_MAGE_SCORE_HANDOVER", "0", 1);
    auto keys = make_cuda_backend(*model);
    unsetenv("DLLM_MAGE_SCORE_HANDOVER");
    auto handed = make_cuda_backend(*model);
    setenv("DLLM_MAGE_SIDE_STREAM", "0", 1);
    auto handed_main = make_cuda_backend(*model);
    unsetenv("DLLM_MAGE_SIDE_STREAM");
    setenv("DLLM_MAGE_SCORE_SLOTS", "1", 1);
    auto one_slot = make_cuda_backend(*model);
    unsetenv("DLLM_MAGE_SCORE_SLOTS");
    // Top-k runs of 2 of the 3 layers: layer 1's during the forward, layer 2's after the outputs.
    setenv("DLLM_MAGE_TOPK_LAYERS", "2", 1);
    auto runs = make_cuda_backend(*model);
    unsetenv("DLLM_MAGE_TOPK_LAYERS");
    std::vector<std::vector<SequenceResult>> results;
    for (Backend* b : {keys.get(), handed.get(), handed_main.get(), one_slot.get(), runs.get()}) {
      Seq s1 = prefilled(*b, cs.n_prefix, cs.n_prefix + 64),
          s2 = prefilled(*b, cs.n_prefix / 2, cs.n_prefix + 64);
      const std::vector<int32_t> masks(size_t(cs.block), kMask);
      std::vector<SequenceForward> f = {s1.request(masks, cs.n_prefix, 32),
                                        s2.request(masks, cs.n_prefix / 2, 32)};
      f[0].sparse = mage_select(cs.k, 1, cs.select_queries);
      f[1].sparse = mage_select(cs.k / 2, 1, std::max(1, cs.select_queries - 1));
      results.push_back(b->forward(f));
    }
    for (size_t s = 0; s < 2; ++s) {
      const SequenceResult &a = results[0][s], &b = results[1][s];
      EXPECT_EQ(a.logits, b.logits) << "sequence " << s;
      compare_sets(a, b, s, compared, identical);
      for (size_t other : {2, 3, 4}) {  // main stream; one slot; top-k runs
        const SequenceResult& m = results[other][s];
        EXPECT_EQ(b.logits, m.logits) << "sequence " << s << ", run " << other;
        ASSERT_EQ(b.sparse_selection.size(), m.sparse_selection.size());
        for (size_t i = 0; i < b.sparse_selection.size(); ++i)
          EXPECT_EQ(b.sparse_selection[i].slots, m.sparse_selection[i].slots)
              << "sequence " << s << " set " << i << ", run " << other;
      }
    }
  }
  std::printf("  scores handed over vs a pass over K: %d of %d sets identical\n", identical,
              compared);
  EXPECT_GT(compared, 0);
  EXPECT_GE(identical, compared * 9 / 10);
}

TEST(CudaMage, UnsupportedRequestsNameTheProblem) {
  auto model = random_sdar(128);
  auto gpu = make_cuda_backend(*model);
  Seq g = prefilled(*gpu, 100, 200);
  auto expect_error = [&](SequenceForward f, const std::string& needle) {
    try {
      g.run(f);
      ADD_FAILURE() << "expected: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // Quest's partial last page is masked by position, which only the block-causal rule reads
  // (100 slots are 6 pages of 16 and 4 keys).
  SequenceForward quest = g.request(later_block(32), 100, 32);
  quest.rule = AttentionRule::causal();
  quest.sparse = mage_attend(16, 1);
  quest.sparse->select = SparseMethod::kQuest;
  expect_error(quest,
               "over a partial last page (100 cached slots, page size 16) needs the "
               "block-causal rule");
  SequenceForward unselected = g.request(later_block(32), 100, 32);
  unselected.sparse = mage_attend(16, 1);
  expect_error(unselected, "no selection is stored");
  // A selection averages over at most 256 rows: 64 query rows at G = 4. A block of 96 is refused
  // by check_forward (the engine's per-request check) and by forward itself, by name; with
  // --sparse-select-queries 8 the same block selects.
  SequenceForward wide = g.request(later_block(96), 100, 96);
  wide.sparse = mage_select(16, 1);
  const std::string needle = "selects from 96 — pass --sparse-select-queries 1..64";
  try {
    gpu->check_forward(wide, 0);
    ADD_FAILURE() << "check_forward: expected " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  expect_error(wide, needle);
  wide.sparse->select = SparseMethod::kSparseD;
  expect_error(wide, "SparseD selection averages over at most 64 query rows");
  wide.sparse = mage_select(16, 1, 8);
  gpu->check_forward(wide, 0);
  EXPECT_EQ(g.run(wide).logits.size(), size_t(96) * 3000);
}

// Quest over prefixes that end in a partial page (47 = 2 x 16 + 15 keys, 100 = 6 x 16 + 4, ...):
// the partial page is scored over its own keys and may be chosen; the GPU's key lists hold the
// masked slot for its missing keys. The CPU attends the GPU's sets (so only the forward's
// arithmetic differs) and its logits must agree to rounding — a visible masked slot, or the
// partial page's keys read wrongly, moves them far more. Fails if no set chose a partial page.
TEST(CudaMage, QuestOverAPartialLastPageTracksTheCpu) {
  auto model = random_sdar(128);
  auto gpu = make_cuda_backend(*model);
  auto cpu = make_cpu_backend(*model);
  const ModelConfig& c = model->config();
  int partial_chosen = 0, sets = 0, equal_sets = 0;
  for (const int k : {32, 64})
    for (const int n_prefix : {47, 79, 100, 111, 143}) {
      if (n_prefix <= k) continue;  // attended densely
      SCOPED_TRACE("k " + std::to_string(k) + ", prefix " + std::to_string(n_prefix));
      Seq g = prefilled(*gpu, n_prefix, n_prefix + 64),
          h = prefilled(*cpu, n_prefix, n_prefix + 64);
      SequenceForward fg = g.request(later_block(32), n_prefix, 32),
                      fc = h.request(later_block(32), n_prefix, 32);
      SparseStep quest = mage_select(k, 1, 0, SparseMethod::kQuest);
      quest.page_size = 16;
      quest.attend_selected = true;
      fg.sparse = fc.sparse = quest;
      const SequenceResult rg = g.run(fg);
      auto& cpu_sets = static_cast<cpu_backend::CpuMethodState&>(*h.state).sparse_sets;
      cpu_sets = rg.sparse_selection;  // the CPU attends the GPU's sets, selecting its own aside
      fc.sparse->keep_selection = false;
      const SequenceResult rc = h.run(fc);
      EXPECT_LE(rel_error(rg.logits, rc.logits), 2e-2);
      const int32_t whole = n_prefix / 16 * 16;
      for (int64_t i = c.num_kv_heads; i < int64_t(rg.sparse_selection.size()); ++i) {
        std::vector<int32_t> got = rg.sparse_selection[size_t(i)].slots,
                             own = rc.sparse_selection[size_t(i)].slots;
        std::sort(got.begin(), got.end());
        std::sort(own.begin(), own.end());
        ++sets;
        equal_sets += got == own;
        // Whole pages of 16, and the partial page's valid keys when it was chosen.
        const bool partial = !got.empty() && got.back() >= whole;
        partial_chosen += partial;
        EXPECT_EQ(got.size(), size_t(partial ? k - 16 + (n_prefix - whole) : k)) << "set " << i;
        EXPECT_LT(got.back(), n_prefix) << "set " << i;
      }
    }
  std::printf("  Quest sets choosing a partial last page: %d of %d; equal to the CPU's own: %d\n",
              partial_chosen, sets, equal_sets);
  EXPECT_GT(partial_chosen, 0) << "no set chose a partial page: the test did not exercise it";
}

// How a GPU decode tracked the CPU's (track_cpu_step_by_step).
struct Tracked {
  bool identical = false;
  int sets = 0, equal_sets = 0;  // selections made, and how many of the GPU's equal the CPU's own
};

// Decodes `prompt` on both backends forward by forward, the CPU attending through the GPU's
// sets (MAGE / SparseD: copied after each selecting forward; Quest, which selects in every
// forward: copied before the CPU's forward, which then selects its own sets for the count only),
// so that a divergence can only come from bf16 in the forward. At the first divergence the two
// forwards' numbers must agree to rounding and, in a greedy decode, the CPU's closest decision
// margin must be a near-tie (both printed); a sampled decode (temperature > 0) draws the same
// random numbers on both, so its token may also flip at a draw the statistics do not show.
// Stops where the CPU's final tokens reach one of stop_ids, as the engine does.
Tracked track_cpu_step_by_step(const Model& model, Backend& gpu, Backend& cpu,
                               const DecodeParams& d, const std::vector<int32_t>& prompt,
                               const std::vector<int64_t>& stop_ids, const std::string& name) {
  Tracked t;
  auto dc = make_decoder(model.config(), d, prompt), dg = make_decoder(model.config(), d, prompt);
  auto kc = cpu.create_cache(dc->cache_capacity()), kg = gpu.create_cache(dg->cache_capacity());
  auto sc = cpu.create_method_state(), sg = gpu.create_method_state();
  auto& cpu_sets = static_cast<cpu_backend::CpuMethodState&>(*sc).sparse_sets;
  int sparse_forwards = 0;
  test::DecodeTrace tc, tg;  // each backend's forwards
  for (int step = 0; step < 500; ++step) {
    SequenceForward fc, fg;
    fc.cache = kc.get();
    fg.cache = kg.get();
    fc.state = sc.get();
    fg.state = sg.get();
    const bool more = dc->plan(fc);
    EXPECT_EQ(more, dg->plan(fg));
    if (!more) break;
    fc.want_routing = fg.want_routing = true;  // LLaDA2: rows routed apart must be near-ties
    EXPECT_EQ(fc.tokens, fg.tokens) << "step " << step;
    sparse_forwards += fg.sparse && fg.sparse->attend_selected;
    const bool selects = fg.sparse && fg.sparse->select != SparseMethod::kNone;
    const bool quest = selects && fg.sparse->select == SparseMethod::kQuest;
    if (selects) fc.sparse->want_selection = fg.sparse->want_selection = true;
    const auto rg = gpu.forward(std::span(&fg, 1))[0];
    if (quest) {  // the CPU attends the GPU's sets of this very forward
      cpu_sets = rg.sparse_selection;
      fc.sparse->keep_selection = false;
    }
    const auto rc = cpu.forward(std::span(&fc, 1))[0];
    if (selects) {
      EXPECT_EQ(rg.sparse_selection.size(), rc.sparse_selection.size());
      for (size_t i = 0; i < std::min(rg.sparse_selection.size(), rc.sparse_selection.size());
           ++i) {
        const SparseSet &a = rg.sparse_selection[i], &b = rc.sparse_selection[i];
        if (a.slots.empty() && !a.dense) continue;  // an exact layer
        ++t.sets;
        t.equal_sets += a.slots == b.slots && a.dense == b.dense;
      }
      cpu_sets = rg.sparse_selection;
    }
    dc->observe(rc);
    dg->observe(rg);
    tc.push_back(test::record_of(rc));
    tg.push_back(test::record_of(rg));
    if (dc->canvas() != dg->canvas()) {
      test::expect_near_tie(name + " GPU vs CPU", test::parting_at(size_t(step), tg, tc, d), d);
      return t;  // (SparseD's exact first steps may diverge before any sparse forward)
    }
    const auto& fin = dc->final_tokens();
    if (std::any_of(fin.begin(), fin.end(), [&](int32_t id) {
          return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
        }))
      break;
  }
  EXPECT_GT(sparse_forwards, 0);
  EXPECT_EQ(dg->final_tokens(), dc->final_tokens());
  t.identical = dg->final_tokens() == dc->final_tokens();
  return t;
}

// Greedy decoding with MAGE, Quest and SparseD on the GPU follows the CPU step for step, on the
// sparse trajectory fixtures' cases (k small enough that the selection changes tokens); any
// divergence is at a near-tie of the CPU's own numbers (as CudaBackend.GreedyGenerationMatchesCpu).
TEST(CudaMage, GreedyGenerationTracksCpuWithMageAndSparseD) {
  const auto fx = read_json_file(test::fixtures_dir() / "sparse" / "trajectories.json");
  int cases = 0, identical = 0, sets = 0, equal_sets = 0;
  for (const auto& c : fx["cases"]) {
    const std::string method = c["sparse"]["method"];
    const std::string name = c["model"].get<std::string>() + " " + method;
    SCOPED_TRACE(name);
    const std::string model_name = c["model"];
    auto model = Model::load(model_name == "tiny-block" ? test::models_dir() / model_name
                                                        : test::model_fixture(model_name));
    auto gpu = make_cuda_backend(*model);
    auto cpu = make_cpu_backend(*model);
    DecodeParams d;
    d.strategy = "block";
    d.max_tokens = c["max_tokens"];
    d.block_length = c["block_length"];
    if (c.contains("sub_block_length")) d.sub_block_length = c["sub_block_length"];
    d.threshold = 0.9f;
    d.sampler.temperature = 0;
    const auto& sp = c["sparse"];
    d.sparse.method = parse_sparse_method(method);
    d.sparse.k = sp["k"];
    d.sparse.exact_layers = sp["exact_layers"];
    d.sparse.select_queries = sp["select_queries"];
    d.sparse.dense_fraction = sp["dense_fraction"];
    d.sparse.page_size = sp["page_size"];
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    d = resolve_decode_params(model->config(), d, int64_t(prompt.size()));
    const Tracked t = track_cpu_step_by_step(*model, *gpu, *cpu, d, prompt, {}, name);
    ++cases;
    identical += t.identical;
    sets += t.sets;
    equal_sets += t.equal_sets;
  }
  std::printf(
      "  MAGE / Quest / SparseD greedy GPU trajectories identical to CPU: %d of %d; GPU "
      "sets equal to the CPU's own: %d of %d\n",
      identical, cases, equal_sets, sets);
  EXPECT_EQ(cases, 6);
  EXPECT_GT(sets, 0);
}

// LLaDA2.x decodes with MAGE, Quest and SparseD (block diffusion and token editing) on the
// llada2-tiny fixture (head_dim 16, two query heads per KV head), the cases of
// sparse/llada2-trajectories.json, tracked forward by forward as above (the CPU's ids equal the
// reference's, SparseTrajectory.Llada2MatchesReferenceAfterEveryForward); the whole generations
// also run through the GPU engine.
TEST(CudaMage, Llada2GenerationsTrackTheCpu) {
  const auto fx = read_json_file(test::fixtures_dir() / "sparse" / "llada2-trajectories.json");
  auto model = Model::load(test::model_fixture(fx["model"]));
  auto gpu = make_cuda_backend(*model);
  auto cpu = make_cpu_backend(*model);
  EngineCore eg(*model, *gpu);
  int cases = 0, identical = 0, sets = 0, equal_sets = 0;
  for (const auto& c : fx["cases"]) {
    const std::string name = "llada2 " + c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const auto& p = c["params"];
    const DecodeParams d = resolve_decode_params(
        model->config(), test::llada2_sparse_params_from(c), int64_t(c["prompt"].size()));
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto stop_ids = p["stop_ids"].get<std::vector<int64_t>>();
    const Tracked t = track_cpu_step_by_step(*model, *gpu, *cpu, d, prompt, stop_ids, name);
    ++cases;
    identical += t.identical;
    sets += t.sets;
    equal_sets += t.equal_sets;
    GenerationRequest req;
    req.prompt = prompt;
    req.params = d;
    req.stop_ids = stop_ids;
    const auto g = eg.generate(req);
    EXPECT_NE(g.finish_reason, "error") << g.error;
  }
  std::printf(
      "  LLaDA2 MAGE / Quest / SparseD GPU decodes identical to CPU: %d of %d; GPU sets "
      "equal to the CPU's own: %d of %d\n",
      identical, cases, equal_sets, sets);
  EXPECT_EQ(cases, 11);
  EXPECT_GT(sets, 0);
}

}  // namespace
}  // namespace dllm
