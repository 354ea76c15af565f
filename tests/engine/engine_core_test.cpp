// The engine core with many requests: batch invariance (a request's ids do not depend on what
// runs with it or when it arrives), preemption by recompute, cancellation, per-request errors,
// and automatic prefix sharing — on the CPU backend with the embedded models.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/matmul_precision.h"
#include "core/error.h"
#include "support/engine_runs.h"
#include "support/scoped_matmul.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

std::filesystem::path embedded(const std::string& name) {
  return test::models_dir() / name;
}

void expect_same(const std::vector<test::EngineOutcome>& alone,
                 const std::vector<test::EngineOutcome>& together) {
  ASSERT_EQ(alone.size(), together.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(together[i].finishes, 1);
    EXPECT_EQ(together[i].error, "");
    EXPECT_FALSE(alone[i].ids.empty());
    EXPECT_EQ(together[i].ids, alone[i].ids);
    EXPECT_EQ(together[i].finish_reason, alone[i].finish_reason);
  }
}

struct InvarianceCase {
  const char* model;
  std::vector<std::string> strategies;
  int requests;
};

class BatchInvariance : public ::testing::TestWithParam<InvarianceCase> {};

// Every request alone, then all of them (of mixed strategies, lengths, sampling and arrival
// times) in one engine: the same ids, bit for bit.
TEST_P(BatchInvariance, RequestsBatchedEqualRequestsAlone) {
  const InvarianceCase c = GetParam();
  auto model = Model::load(embedded(c.model));
  auto backend = make_cpu_backend(*model);
  const auto cases = test::mixed_cases(*model, c.strategies, c.requests, 12);
  const auto alone = test::run_alone(*model, *backend, cases);
  EngineCore core(*model, *backend);
  const auto together = test::run_together(core, cases);
  expect_same(alone, together);
  EXPECT_GT(core.counters().sequences_in_steps, 2 * core.counters().steps)
      << "the requests must actually share forwards";
  EXPECT_EQ(core.kv_pool().used_pages(), 0) << "every page is back in the pool";
}

INSTANTIATE_TEST_SUITE_P(
    EmbeddedModels, BatchInvariance,
    ::testing::Values(InvarianceCase{"tiny-block",
                                     {"block", "s2d2", "ar", "block+mage", "block+quest",
                                      "block+sparsed"},
                                     24},
                      InvarianceCase{"tiny-full", {"full", "d2cache", "fastdllm", "dllmcache"}, 12},
                      InvarianceCase{"tiny-causal", {"wedlm", "ar"}, 16}),
    [](const auto& info) {
      std::string s = info.param.model;
      for (char& ch : s)
        if (ch == '-') ch = '_';
      return s;
    });

// tiny-block's mixed requests under the matmul precision in force: batched, each gets its ids
// alone.
void expect_tiny_block_batched_equal_alone() {
  auto model = Model::load(embedded("tiny-block"));
  auto backend = make_cpu_backend(*model);
  const auto cases = test::mixed_cases(*model, {"block", "s2d2", "ar"}, 16, 12);
  const auto alone = test::run_alone(*model, *backend, cases);
  EngineCore core(*model, *backend);
  const auto together = test::run_together(core, cases);
  expect_same(alone, together);
  EXPECT_GT(core.counters().sequences_in_steps, 2 * core.counters().steps);
}

// The opt-in bf16 GEMM (--cpu-matmul bf16, backend/cpu/gemm_bf16.h) keeps the contract too: its
// products have other bits than fp32's, but a row's bits still never depend on its batch.
TEST(EngineCore, Bf16MatmulRequestsBatchedEqualRequestsAlone) {
  if (!cpu::gemm_bf16_available()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  test::ScopedMatmul dot(cpu::MatmulPrecision::kBf16);
  expect_tiny_block_batched_equal_alone();
}

// The AMX GEMM (backend/cpu/gemm_amx.h; the default where the CPU has it, for matrices the tiny
// models' are below — here on every matrix) keeps the contract too.
TEST(EngineCore, AmxMatmulRequestsBatchedEqualRequestsAlone) {
  if (!cpu::gemm_amx_available()) GTEST_SKIP() << "this CPU (or kernel) offers no AMX-BF16";
  test::ScopedMatmul tiles(cpu::MatmulPrecision::kAmx, test::kAmxForAll);
  expect_tiny_block_batched_equal_alone();
}

// A pool too small for every request at once: the newest running sequences are preempted and
// recomputed later, with the ids they would have had alone.
TEST(EngineCore, PreemptionByRecomputeKeepsResults) {
  auto model = Model::load(embedded("tiny-block"));
  auto backend = make_cpu_backend(*model);
  backend->create_kv_pool(24, 16);  // 384 slots; 16 requests need ~40 each
  const auto cases = test::mixed_cases(*model, {"block", "s2d2", "ar"}, 16, 0);
  const auto alone = test::run_alone(*model, *backend, cases);
  EngineCore core(*model, *backend);
  const auto together = test::run_together(core, cases);
  expect_same(alone, together);
  int64_t preempted = 0;
  for (const auto& o : together) preempted += o.preemptions;
  EXPECT_GT(preempted, 0) << "the pool was meant to run out";
  EXPECT_EQ(core.counters().preemptions, preempted);
  EXPECT_EQ(core.kv_pool().used_pages(), 0);
}

// A request that can never fit the pool, or whose forward is invalid, ends with an error; the
// others finish as if alone.
TEST(EngineCore, ARequestThatCannotFitFailsAlone) {
  auto model = Model::load(embedded("tiny-block"));
  auto backend = make_cpu_backend(*model);
  backend->create_kv_pool(12, 16);  // 192 slots
  auto cases = test::mixed_cases(*model, {"block"}, 4, 0);
  test::EngineCase huge = cases[0];
  huge.params.max_tokens = 400;  // 400+ slots: more than the whole pool
  cases.insert(cases.begin() + 2, huge);
  EngineCore core(*model, *backend);
  const auto together = test::run_together(core, cases);
  EXPECT_EQ(together[2].finish_reason, "error");
  EXPECT_NE(together[2].error.find("KV pages"), std::string::npos) << together[2].error;
  cases.erase(cases.begin() + 2);
  const auto alone = test::run_alone(*model, *backend, cases);
  for (size_t i = 0, j = 0; i < together.size(); ++i) {
    if (i == 2) continue;
    EXPECT_EQ(together[i].ids, alone[j].ids) << i;
    EXPECT_EQ(together[i].finishes, 1);
    ++j;
  }
  EXPECT_EQ(core.counters().errors, 1);
}

// A backend that refuses Quest forwards in check_forward(), as the CUDA backend refuses Quest
// over a prefix of partial pages.
class RefusesQuest final : public cpu_backend::CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  void check_forward(const SequenceForward& seq, size_t index) const override {
    if (seq.sparse && seq.sparse->select == SparseMethod::kQuest)
      fail("forward request ", index, ": this backend takes no quest");
  }
};

// A forward the backend refuses when the engine plans it ends that request with the backend's
// error; the requests batched with it finish as if alone and the pool is empty afterwards.
TEST(EngineCore, AForwardTheBackendRefusesFailsItsRequestAlone) {
  auto model = Model::load(embedded("tiny-block"));
  RefusesQuest backend(*model);
  auto cases = test::mixed_cases(*model, {"block"}, 4, 0);
  test::EngineCase quest = cases[1];
  quest.params.sparse.method = SparseMethod::kQuest;
  quest.params.sparse.k = 16;
  cases.insert(cases.begin() + 1, quest);
  EngineCore core(*model, backend);
  const auto together = test::run_together(core, cases);
  EXPECT_EQ(together[1].finish_reason, "error");
  EXPECT_NE(together[1].error.find("this backend takes no quest"), std::string::npos)
      << together[1].error;
  EXPECT_EQ(together[1].finishes, 1);
  cases.erase(cases.begin() + 1);
  auto plain = make_cpu_backend(*model);
  const auto alone = test::run_alone(*model, *plain, cases);
  for (size_t i = 0, j = 0; i < together.size(); ++i) {
    if (i == 1) continue;
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(together[i].finish_reason, alone[j].finish_reason);
    EXPECT_EQ(together[i].ids, alone[j].ids);
    ++j;
  }
  EXPECT_EQ(core.counters().errors, 1);
  EXPECT_EQ(core.kv_pool().used_pages(), 0);
}

// Random arrivals and cancellations over a small pool: after every step the pool is consistent;
// cancelled requests end once as "cancelled", the others with their solo ids; nothing leaks.
TEST(EngineCore, RandomSubmitAndCancelLeakNothing) {
  auto model = Model::load(embedded("tiny-block"));
  auto backend = make_cpu_backend(*model);
  backend->create_kv_pool(32, 16);
  const auto cases = test::mixed_cases(*model, {"block", "s2d2", "ar"}, 40, 0);
  const auto alone = test::run_alone(*model, *backend, cases);
  std::mt19937 rng(7);
  EngineCore core(*model, *backend);
  std::vector<test::EngineOutcome> out(cases.size());
  std::vector<bool> cancelled(cases.size(), false);
  size_t added = 0;
  while (added < cases.size() || !core.idle()) {
    if (added < cases.size() && rng() % 2 == 0) {
      SequenceRequest r;
      r.id = added;
      r.prompt = cases[added].prompt;
      r.params = cases[added].params;
      auto& o = out[added];
      r.callbacks.on_finish = [&o](GenerationResult&& g) {
        o.ids = g.ids;
        o.finish_reason = g.finish_reason;
        ++o.finishes;
      };
      core.add(std::move(r));
      ++added;
    }
    if (added > 0 && rng() % 5 == 0) {
      const size_t victim = rng() % added;
      if (out[victim].finishes == 0) {
        ASSERT_TRUE(core.cancel(victim));
        cancelled[victim] = true;
      } else {
        EXPECT_FALSE(core.cancel(victim)) << "a finished request cannot be cancelled";
      }
    }
    core.step();
    const KvPool& pool = core.kv_pool();
    ASSERT_LE(pool.used_pages(), pool.num_pages());
    ASSERT_EQ(pool.used_pages() + pool.available_pages(), pool.num_pages());
    if (core.idle()) {
      ASSERT_EQ(pool.used_pages(), 0) << "an idle engine holds no page";
    }
  }
  int n_cancelled = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(out[i].finishes, 1);
    if (cancelled[i]) {
      EXPECT_EQ(out[i].finish_reason, "cancelled");
      ++n_cancelled;
    } else {
      EXPECT_EQ(out[i].ids, alone[i].ids);
    }
  }
  EXPECT_GT(n_cancelled, 0);
  EXPECT_EQ(core.counters().cancelled, n_cancelled);
}

// A later request with the same prompt prefix reuses an earlier one's prefill pages when their
// prefills attend alike (block diffusion and S2D2 block-causally, AR causally), and decodes the
// same ids as without sharing.
TEST(EngineCore, IdenticalPromptPrefixesArePrefilledOnce) {
  auto model = Model::load(embedded("tiny-block"));
  auto backend = make_cpu_backend(*model);
  auto cases = test::mixed_cases(*model, {"block", "s2d2", "ar", "ar"}, 4, 0);
  std::vector<int32_t> system;  // a long shared "system prompt"
  for (int i = 0; i < 70; ++i) system.push_back(100 + (i * 37) % 3000);
  for (auto& c : cases) {
    c.prompt.insert(c.prompt.begin(), system.begin(), system.end());
    c.params =
        resolve_decode_params(model->config(), c.params, static_cast<int64_t>(c.prompt.size()));
  }
  SchedulerConfig no_sharing;
  no_sharing.prefix_sharing = false;
  std::vector<test::EngineOutcome> fresh;
  for (const auto& c : cases) {
    EngineCore core(*model, *backend, no_sharing);
    fresh.push_back(test::run_together(core, {c})[0]);
  }
  EngineCore core(*model, *backend);
  std::vector<test::EngineOutcome> shared;
  for (const auto& c : cases) shared.push_back(test::run_together(core, {c})[0]);
  const int64_t expect_reused[] = {0, 64, 0, 64};  // at least (whole pages of the system prompt)
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(shared[i].ids, fresh[i].ids) << i;
    if (expect_reused[i] == 0)
      EXPECT_EQ(shared[i].prefix_cached_tokens, 0) << i;
    else
      EXPECT_GE(shared[i].prefix_cached_tokens, expect_reused[i]) << i;
  }
  EXPECT_EQ(core.kv_pool().used_pages(), 0);
  EXPECT_GT(core.kv_pool().cached_pages(), 0) << "published prefix pages stay cached";
}

}  // namespace
}  // namespace dllm

namespace dllm {
namespace {

// --fuse-commit: a finished block is committed in the next block's first denoising forward. The
// same tokens as the separate commit forwards (greedy and sampled), one forward fewer per block.
TEST(EngineCore, FusedCommitsDecodeTheSameTokens) {
  auto model = Model::load(test::models_dir() / "tiny-block");
  auto backend = make_cpu_backend(*model);
  EngineCore core(*model, *backend);
  int fewer = 0;
  for (const auto& c : test::mixed_cases(*model, {"block"}, 12, 0)) {
    GenerationRequest plain;
    plain.prompt = c.prompt;
    plain.params = c.params;
    plain.params.max_tokens = 24;
    plain.params.threshold = 1.0f;  // one token per step: many blocks
    GenerationRequest fused = plain;
    fused.params.fuse_commit = true;
    const auto a = core.generate(plain), b = core.generate(fused);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.finish_reason, b.finish_reason);
    EXPECT_LE(b.stats.forwards, a.stats.forwards);
    fewer += b.stats.forwards < a.stats.forwards;
  }
  EXPECT_GT(fewer, 6);
}

// DLLM_STEP_LOG: one line per step, whose counts add up to what the engine counted.
TEST(EngineCore, StepLogHasOneLinePerStep) {
  auto model = Model::load(embedded("tiny-block"));
  auto backend = make_cpu_backend(*model);
  const auto path = std::filesystem::temp_directory_path() / "dllm_step_log_test.tsv";
  ::setenv("DLLM_STEP_LOG", path.c_str(), 1);
  EngineCore core(*model, *backend);
  ::unsetenv("DLLM_STEP_LOG");
  test::run_together(core, test::mixed_cases(*model, {"block", "ar"}, 6, 4));
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line.rfind("t_s\tschedule_ms\tforward_ms", 0), 0u) << line;
  int64_t lines = 0, sequences = 0, rows = 0, committed = 0;
  double last_t = -1;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    double t, sched, fwd, post;
    int64_t seqs, r, c, waiting, running;
    ASSERT_TRUE(f >> t >> sched >> fwd >> post >> seqs >> r >> c >> waiting >> running) << line;
    EXPECT_GE(t, last_t);
    EXPECT_GE(fwd, 0);
    last_t = t;
    ++lines;
    sequences += seqs;
    rows += r;
    committed += c;
  }
  const EngineCounters& k = core.counters();
  EXPECT_EQ(lines, k.steps);
  EXPECT_EQ(sequences, k.sequences_in_steps);
  EXPECT_EQ(rows, k.rows);
  EXPECT_EQ(committed, k.committed_tokens);
  EXPECT_GT(committed, 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace dllm
