// CUDA kernels against CPU references on fresh random inputs: odd lengths, GQA ratios 1/4/7,
// head_dim 16..128, partial rotary, every attention rule, slot lists, key splits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "attention/attention_rule.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/attention_sm90.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "decode/token_stats.h"

namespace dllm {
namespace {

using cuda::bf16;
using test::rel_error;

TEST(CudaKernels, RmsNormWithRowList) {
  std::mt19937 rng(11);
  // 1000 / 4096: rows held in registers (dim % 4 == 0, up to 8192); 2562 and 9000: the strided
  // path.
  for (const int dim : {1000, 4096, 2562, 9000}) {
    SCOPED_TRACE(dim);
    const int rows = 5;
    auto x = test::random_floats(rows * dim, rng, 2.0f);
    auto w = test::random_floats(dim, rng);
    const auto wb = test::round_bf16(w);
    const std::vector<int32_t> pick = {4, 0, 2};
    auto dx = test::to_device(x);
    auto dw = test::to_device(wb);
    auto drows = test::to_device(pick);
    cuda::DeviceBuffer<bf16> out(pick.size() * dim, "out");
    cuda::rms_norm(dx.get(), drows.get(), reinterpret_cast<const bf16*>(dw.get()), out.get(), 3,
                   dim, 1e-5f, nullptr);
    const auto got = test::bf16_to_floats(test::to_host(out));
    std::vector<float> ref(pick.size() * dim);
    for (size_t r = 0; r < pick.size(); ++r)
      cpu::rms_norm(&x[pick[r] * dim], dim, w.data(), &ref[r * dim], dim, 1, dim, 1e-5f);
    EXPECT_LT(rel_error(got, ref), 5e-3);
  }
}

TEST(CudaKernels, QkvPostNormRopeAndCacheWrite) {
  std::mt19937 rng(12);
  struct Shape {
    int heads, kv, d, rotary;
    bool norm, bias;
  };
  for (const Shape s : {Shape{8, 2, 128, 128, true, false}, Shape{7, 1, 64, 32, false, true},
                        Shape{4, 4, 16, 16, true, true}, Shape{4, 2, 256, 128, true, false},
                        Shape{2, 1, 32, 32, true, true},
                        // LLaDA-8B's 32 full heads: a staged row over the 48 KB default limit.
                        Shape{32, 32, 128, 128, false, false}}) {
    SCOPED_TRACE(s.d);
    const int n = 5, cap = 16, width = (s.heads + 2 * s.kv) * s.d;
    auto qkv = test::random_floats(n * width, rng);
    auto bias = test::random_floats(width, rng, 0.3f);
    auto qn = test::random_floats(s.d, rng, 0.2f), kn = test::random_floats(s.d, rng, 0.2f);
    for (auto& v : qn) v += 1.0f;
    for (auto& v : kn) v += 1.0f;
    const auto qnb = test::round_bf16(qn), knb = test::round_bf16(kn);
    const std::vector<int32_t> pos = {0, 3, 17, 4000, 123456}, slots = {9, 0, 15, 3, 7};
    const auto inv = cpu::rope_inv_freq(600000.0, s.rotary);
    auto dqkv = test::to_device(qkv), dbias = test::to_device(bias), dinv = test::to_device(inv);
    auto dqn = test::to_device(qnb), dkn = test::to_device(knb);
    auto dpos = test::to_device(pos), dslots = test::to_device(slots);
    cuda::DeviceBuffer<bf16> q(n * s.heads * s.d, "q"), kc(cap * s.kv * s.d, "k"),
        vc(cap * s.kv * s.d, "v");
    cuda::DeviceBuffer<int32_t> spos(cap, "slot positions");
    cuda::QkvPostParams p;
    p.qkv = dqkv.get();
    p.bias = s.bias ? dbias.get() : nullptr;
    p.q_norm = s.norm ? reinterpret_cast<const bf16*>(dqn.get()) : nullptr;
    p.k_norm = s.norm ? reinterpret_cast<const bf16*>(dkn.get()) : nullptr;
    p.positions = dpos.get();
    p.slots = dslots.get();
    p.inv_freq = dinv.get();
    // YaRN's attention factor scales cos and sin (model/rope.h); 1 for unscaled RoPE.
    const float rope_scale = s.d == 16 ? 1.17f : 1.0f;
    p.rope_scale = rope_scale;
    p.q_out = q.get();
    p.k_cache = kc.get();
    p.v_cache = vc.get();
    p.slot_positions = spos.get();
    p.n = n;
    p.heads = s.heads;
    p.kv_heads = s.kv;
    p.head_dim = s.d;
    p.rotary_dim = s.rotary;
    p.eps = 1e-6f;
    cuda::qkv_post(p, nullptr);
    // CPU reference with the same ops.
    std::vector<float> ref = qkv;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < width; ++j) ref[i * width + j] += s.bias ? bias[j] : 0.0f;
    if (s.norm) {
      for (int i = 0; i < n; ++i) {
        cpu::rms_norm(&ref[i * width], s.d, qn.data(), &ref[i * width], s.d, s.heads, s.d, 1e-6f);
        cpu::rms_norm(&ref[i * width + s.heads * s.d], s.d, kn.data(),
                      &ref[i * width + s.heads * s.d], s.d, s.kv, s.d, 1e-6f);
      }
    }
    cpu::rope_neox(ref.data(), width, n, s.heads + s.kv, s.d, s.rotary, pos, inv, rope_scale);
    const auto gq = test::bf16_to_floats(test::to_host(q));
    const auto gk = test::bf16_to_floats(test::to_host(kc)),
               gv = test::bf16_to_floats(test::to_host(vc));
    std::vector<float> got, want;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < s.heads * s.d; ++j) {
        got.push_back(gq[i * s.heads * s.d + j]);
        want.push_back(ref[i * width + j]);
      }
      for (int j = 0; j < s.kv * s.d; ++j) {
        got.push_back(gk[slots[i] * s.kv * s.d + j]);
        want.push_back(ref[i * width + s.heads * s.d + j]);
        got.push_back(gv[slots[i] * s.kv * s.d + j]);
        want.push_back(ref[i * width + (s.heads + s.kv) * s.d + j]);
      }
    }
    EXPECT_LT(rel_error(got, want), 1e-2);
    const auto sp = test::to_host(spos);
    for (int i = 0; i < n; ++i) EXPECT_EQ(sp[slots[i]], pos[i]);
  }
}

TEST(CudaKernels, SwiGlu) {
  std::mt19937 rng(13);
  // 777: one element per thread; 96 and 12288: eight per thread in 16-byte loads.
  for (const int inter : {777, 96, 12288}) {
    SCOPED_TRACE(inter);
    const int n = 5;
    auto gu = test::random_floats(n * 2 * inter, rng, 3.0f);
    const auto bits = test::round_bf16(gu);
    auto d = test::to_device(bits);
    cuda::DeviceBuffer<bf16> out(n * inter, "out");
    cuda::swiglu(reinterpret_cast<const bf16*>(d.get()), out.get(), n, inter, nullptr);
    std::vector<float> ref(n * inter);
    for (int i = 0; i < n; ++i)
      cpu::silu_mul(&gu[i * 2 * inter], &gu[i * 2 * inter + inter], &ref[i * inter], inter);
    EXPECT_LT(rel_error(test::bf16_to_floats(test::to_host(out)), ref), 5e-3);
  }
}

struct AttnCase {
  int n_q, heads, kv, d, n_cache;
  AttentionKind kind;
  int block;
  bool slot_list;
  int splits;  // 0: the heuristic
  // kCustom: every cache key visible, the device mask covers only the query keys
  // (AttentionParams::custom_mask_queries_only, what the backend sends for S2D2's verifier).
  bool queries_only = false;
};

// Runs the CUDA attention and the CPU reference (cpu::attention on the same bf16-rounded inputs,
// visibility from build_visibility) on one random case.
void check_attention(const AttnCase& c, std::mt19937& rng) {
  const int n_keys = c.n_cache + c.n_q;
  const int cap = n_keys + 7;
  const int kvd = c.kv * c.d;
  auto q = test::random_floats(c.n_q * c.heads * c.d, rng);
  auto k = test::random_floats(cap * kvd, rng), v = test::random_floats(cap * kvd, rng);
  const auto qb = test::round_bf16(q), kb = test::round_bf16(k), vb = test::round_bf16(v);
  // Key list: slots in some order (a permutation when slot_list), positions per slot.
  std::vector<int32_t> key_slots(n_keys);
  std::iota(key_slots.begin(), key_slots.end(), 0);
  if (c.slot_list) {
    std::shuffle(key_slots.begin(), key_slots.end(), rng);
    for (auto& s : key_slots) s = (s + 3) % cap;  // skip some slots entirely
  }
  std::vector<int32_t> slot_pos(cap), q_pos(c.n_q);
  std::vector<int32_t> perm(n_keys);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int j = 0; j < n_keys; ++j) slot_pos[key_slots[j]] = perm[j];  // arbitrary logical positions
  for (int i = 0; i < c.n_q; ++i) q_pos[i] = slot_pos[key_slots[c.n_cache + i]];
  AttentionRule rule{c.kind, c.block, {}};
  if (c.kind == AttentionKind::kCustom) {
    rule.custom_mask.resize(c.n_q * n_keys);
    for (auto& b : rule.custom_mask) b = rng() % 4 != 0;
    for (int j = 0; j < n_keys; ++j) rule.custom_mask[j] = 0;  // row 0 sees nothing -> zeros
    if (c.queries_only)
      for (int i = 0; i < c.n_q; ++i)
        for (int j = 0; j < c.n_cache; ++j) rule.custom_mask[size_t(i) * n_keys + j] = 1;
  }
  std::vector<uint8_t> device_mask = rule.custom_mask;
  if (c.queries_only) {
    device_mask.clear();
    for (int i = 0; i < c.n_q; ++i)
      device_mask.insert(device_mask.end(),
                         rule.custom_mask.begin() + size_t(i) * n_keys + c.n_cache,
                         rule.custom_mask.begin() + size_t(i + 1) * n_keys);
  }
  std::vector<int32_t> cache_pos;
  for (int j = 0; j < c.n_cache; ++j) cache_pos.push_back(slot_pos[key_slots[j]]);
  std::vector<uint8_t> visible;
  build_visibility(rule, cache_pos, q_pos, visible);
  std::vector<const float*> krows, vrows;
  for (int j = 0; j < n_keys; ++j) {
    krows.push_back(&k[key_slots[j] * kvd]);
    vrows.push_back(&v[key_slots[j] * kvd]);
  }
  const float scale = 1.0f / std::sqrt(float(c.d));
  std::vector<float> ref(c.n_q * c.heads * c.d);
  cpu::attention(q.data(), c.heads * c.d, krows, vrows, visible, ref.data(), c.heads * c.d, c.n_q,
                 c.heads, c.kv, c.d, scale);

  auto dq = test::to_device(qb), dk = test::to_device(kb), dv = test::to_device(vb);
  auto dslots = test::to_device(key_slots), dspos = test::to_device(slot_pos),
       dqpos = test::to_device(q_pos);
  auto dn = test::to_device(std::vector<int32_t>{n_keys});
  auto dmask = test::to_device(device_mask.empty() ? std::vector<uint8_t>{0} : device_mask);
  cuda::AttentionParams p;
  p.q = reinterpret_cast<const bf16*>(dq.get());
  p.k_cache = reinterpret_cast<const bf16*>(dk.get());
  p.v_cache = reinterpret_cast<const bf16*>(dv.get());
  p.key_slots = c.slot_list ? dslots.get() : nullptr;
  p.n_keys = dn.get();
  p.slot_positions = dspos.get();
  p.q_positions = dqpos.get();
  p.custom_mask = dmask.get();
  p.custom_mask_queries_only = c.queries_only;
  p.kind =
      static_cast<cuda::MaskKind>(static_cast<int>(c.kind == AttentionKind::kCausal          ? 0
                                                   : c.kind == AttentionKind::kBidirectional ? 1
                                                   : c.kind == AttentionKind::kBlockCausal   ? 2
                                                                                             : 3));
  p.block_size = c.block;
  p.n_q = c.n_q;
  p.max_keys = n_keys + 50;  // the graph-capture case: the grid covers more keys than there are
  p.heads = c.heads;
  p.kv_heads = c.kv;
  p.head_dim = c.d;
  p.scale = scale;
  p.splits =
      c.splits ? c.splits : cuda::attention_splits(c.n_q, c.heads, c.kv, c.d, p.max_keys, 132);
  cuda::DeviceBuffer<float> ws;
  cuda::attention_workspace_ensure(
      ws, cuda::attention_workspace_floats(c.n_q, c.heads, c.d, p.splits), nullptr);
  cuda::attention_use_workspace(p, ws.get());
  std::vector<bf16> poison(c.n_q * c.heads * c.d, __float2bfloat16(NAN));
  auto out = test::to_device(poison);
  p.out = out.get();
  // Twice on one workspace, as layers and steps do: the second call must find the split counters
  // the first one used back at zero.
  for (int call = 0; call < 2; ++call) {
    cuda::attention(p, nullptr);
    std::vector<int32_t> counters(cuda::kAttentionSplitCounters);
    DLLM_CUDA_CHECK(cudaMemcpy(counters.data(), ws.get(), counters.size() * sizeof(int32_t),
                               cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < counters.size(); ++i) ASSERT_EQ(counters[i], 0) << "counter " << i;
  }
  const auto got = test::bf16_to_floats(test::to_host(out));
  EXPECT_LT(rel_error(got, ref), 1e-2)
      << "n_q " << c.n_q << " heads " << c.heads << "/" << c.kv << " d " << c.d << " keys "
      << n_keys << " rule " << rule.to_string() << " splits " << p.splits;
  if (c.kind == AttentionKind::kCustom && !c.queries_only)
    for (int t = 0; t < c.heads * c.d; ++t) ASSERT_EQ(got[t], 0.0f);
}

TEST(CudaKernels, AttentionMatchesCpuOnEveryRule) {
  std::mt19937 rng(14);
  const std::vector<AttnCase> cases = {
      {1, 4, 4, 64, 0, AttentionKind::kCausal, 0, false, 0},           // one query, nothing cached
      {7, 32, 8, 128, 300, AttentionKind::kBlockCausal, 4, false, 0},  // GQA 4, odd lengths
      {32, 32, 8, 128, 2000, AttentionKind::kBidirectional, 0, false, 0},
      {32, 28, 4, 128, 1500, AttentionKind::kBlockCausal, 32, false, 0},  // GQA 7
      {64, 8, 8, 64, 70, AttentionKind::kCausal, 0, true, 3},             // MHA, slot list
      {13, 6, 2, 16, 5, AttentionKind::kCustom, 0, false, 1},
      {9, 4, 1, 32, 200, AttentionKind::kCustom, 0, true, 4},
      {200, 8, 2, 128, 0, AttentionKind::kCausal, 0, false, 0},  // prefill-like
      {130, 4, 4, 64, 77, AttentionKind::kBlockCausal, 8, true, 0},
      {16, 8, 2, 128, 5000, AttentionKind::kCausal, 0, false, 40},        // many splits
      {64, 32, 8, 128, 3000, AttentionKind::kCustom, 0, false, 0, true},  // S2D2 verifier-like
      {5, 6, 2, 64, 130, AttentionKind::kCustom, 0, true, 3, true},
  };
  for (const auto& c : cases) check_attention(c, rng);
}

// The Hopper (wgmma) kernel takes head_dim 128 with >= 64 rows per KV head on compute capability
// 9.0; these shapes go through it there: partial row blocks, slot lists, every rule, empty splits
// (more splits than key tiles), a prefill; the splits merged in the kernel (one wave of blocks)
// or by the combine pass (more).
TEST(CudaKernels, HopperAttentionMatchesCpuOnEveryRule) {
  int dev = 0, major = 0, minor = 0;
  DLLM_CUDA_CHECK(cudaGetDevice(&dev));
  DLLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  DLLM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
#ifdef DLLM_HAVE_SM90A
  // On an sm_90 device the dispatch must really take the Hopper kernel for these shapes.
  if (major == 9 && minor == 0) EXPECT_TRUE(cuda::sm90_attention_serves(128, 64));
#endif
  std::mt19937 rng(16);
  const std::vector<AttnCase> cases = {
      {32, 32, 8, 128, 4000, AttentionKind::kBlockCausal, 32, false, 0},  // a denoising step
      {16, 32, 8, 128, 1000, AttentionKind::kBlockCausal, 16, true, 0},   // 64 rows, slot list
      {32, 28, 4, 128, 1500, AttentionKind::kBlockCausal, 32, false, 0},  // GQA 7: 224 rows
      {100, 8, 2, 128, 333, AttentionKind::kCausal, 0, false, 0},         // odd lengths
      {70, 16, 16, 128, 77, AttentionKind::kCustom, 0, true, 3},          // MHA, 70 rows
      {64, 32, 8, 128, 3000, AttentionKind::kCustom, 0, false, 0, true},  // S2D2 verifier-like
      {128, 32, 8, 128, 0, AttentionKind::kBidirectional, 0, false, 0},
      {32, 32, 8, 128, 200, AttentionKind::kBidirectional, 0, false, 7},  // empty splits
      {300, 8, 2, 128, 64, AttentionKind::kCausal, 0, true, 0},           // prefill-like
      // One wave of blocks (8 KV heads x 33 splits): the kernel merges its splits itself ...
      {32, 32, 8, 128, 9000, AttentionKind::kBlockCausal, 32, false, 0},
      {32, 32, 8, 128, 3000, AttentionKind::kCausal, 0, true, 30},
      {65, 3, 3, 128, 4000, AttentionKind::kCausal, 0, false, 33},  // odd partial-row count
      // ... more blocks than fit on the GPU at once: the combine pass merges them.
      {32, 32, 8, 128, 5000, AttentionKind::kBlockCausal, 32, false, 80},
  };
  for (const auto& c : cases) check_attention(c, rng);
#ifdef DLLM_HAVE_SM90A
  // On an H100 SXM (132 SMs) the cases above took both paths (unless DLLM_ATTN_MERGE=0).
  if (major == 9 && minor == 0 && cuda::device_sm_count() == 132 &&
      !std::getenv("DLLM_ATTN_MERGE")) {
    cuda::AttentionParams p;
    p.n_q = 32;
    p.heads = 32;
    p.kv_heads = 8;
    p.head_dim = 128;
    p.splits = 33;
    EXPECT_TRUE(cuda::sm90_attention_merges(p));
    p.splits = 80;
    EXPECT_FALSE(cuda::sm90_attention_merges(p));
    p.n_q = 65;  // the odd partial-row case: 2 row blocks x 3 heads x 33 splits
    p.heads = p.kv_heads = 3;
    p.splits = 33;
    EXPECT_TRUE(cuda::sm90_attention_merges(p));
  }
#endif
}

// The device's greedy sums, finished on the host (row_sums_partial, merge_vocab_shards), against
// compute_token_stats on the whole row — for whole rows and for a row cut into two vocabulary
// slices (a tensor-parallel group's LM head), merged.
TEST(CudaKernels, GreedyRowSumsMatchTheReference) {
  std::mt19937 rng(15);
  // 300 and 151936: 16-byte loads; 301: one logit at a time.
  for (int vocab : {300, 301, 151936}) {
    SCOPED_TRACE(vocab);
    const int rows = 6;
    auto logits = test::random_floats(rows * vocab, rng, 3.0f);
    logits[2 * vocab + 17] = logits[2 * vocab + 5] = 100.0f;  // a tie: the lower id wins
    logits[0 * vocab + 7] = 1000.0f;                           // banned: must not win
    logits[3 * vocab + vocab - 2] = 1000.0f;                   // banned, in the second slice
    SamplerConfig s;
    s.banned_tokens = {7, vocab - 2};
    cuda::BannedTokens ban;
    ban.ids[0] = 7;
    ban.ids[1] = vocab - 2;
    ban.n = 2;
    // Slices [0, cut) and [cut, vocab) as a group of two computes them (each its own buffer).
    const int cut = vocab / 2 + (vocab % 4 == 0 ? 0 : 1);
    std::vector<float> first, second;
    for (int r = 0; r < rows; ++r) {
      first.insert(first.end(), &logits[r * vocab], &logits[r * vocab + cut]);
      second.insert(second.end(), &logits[r * vocab + cut], &logits[(r + 1) * vocab]);
    }
    auto sums_of = [&](const std::vector<float>& host, int width, int begin) {
      auto d = test::to_device(host);
      cuda::DeviceBuffer<cuda::DeviceRowSums> out(rows, "sums");
      cuda::greedy_row_sums(d.get(), rows, width, begin, ban, out.get(), nullptr);
      return test::to_host(out);
    };
    const auto whole = sums_of(logits, vocab, 0);
    const auto lo = sums_of(first, cut, 0), hi = sums_of(second, vocab - cut, cut);
    for (int r = 0; r < rows; ++r) {
      SCOPED_TRACE(r);
      const auto row = std::span<const float>(&logits[r * vocab], vocab);
      const TokenStats ref = compute_token_stats(row, s, 0.0);
      const auto p = sampling_distribution(row, s);
      double collision = 0;
      for (double v : p) collision += v * v;
      const VocabShardPartial one[] = {cuda::row_sums_partial(whole[r], 0)};
      const VocabShardPartial two[] = {cuda::row_sums_partial(lo[r], 0),
                                       cuda::row_sums_partial(hi[r], cut)};
      using Parts = std::span<const VocabShardPartial>;
      for (Parts parts : {Parts(one), Parts(two)}) {
        const TokenStats got = merge_vocab_shards(parts, s, {});
        EXPECT_EQ(got.argmax, ref.argmax) << parts.size() << " slices";
        EXPECT_EQ(got.token, ref.argmax);
        EXPECT_NEAR(got.p_max, ref.p_max, 1e-4 + 1e-3 * ref.p_max);
        EXPECT_NEAR(got.entropy, ref.entropy, 1e-3 + 1e-4 * ref.entropy);
        EXPECT_NEAR(got.margin, ref.margin, 1e-4 + 1e-3 * ref.margin);
        // Sum of p^2 (S2D2's Renyi-2 estimator), against the host's.
        EXPECT_NEAR(merged_collision(parts), collision, 1e-5 + 1e-3 * collision);
      }
    }
    EXPECT_EQ(whole[2].argmax, 5);
    EXPECT_NEAR(merge_vocab_shards(std::vector{cuda::row_sums_partial(whole[2], 0)}, s, {}).margin,
                0.0f, 1e-6);
  }
}

}  // namespace
}  // namespace dllm
