// S2D2 on the CUDA backend: the span-verify kernel against the host functions on random rows,
// and whole S2D2 generations on the GPU against the CPU on the tiny SDAR / Fast-dLLM v2 / LLaDA2
// fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "cuda_test_util.h"
#include "decode/s2d2_verify.h"
#include "decode/token_stats.h"
#include "engine/engine_core.h"
#include "io/json_file.h"
#include "support/decision_trace.h"
#include "support/s2d2_fixture_params.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

// Distance of u·Z from the nearest cumulative boundary of the host's inverse-CDF walk, relative
// to Z: a draw within float rounding of a boundary may legitimately land on the neighbour.
double boundary_margin(const std::vector<double>& q, const std::vector<double>& p, double u) {
  std::vector<double> w(q.size());
  double z = 0;
  for (size_t i = 0; i < q.size(); ++i) z += w[i] = std::max(q[i] - p[i], 0.0);
  if (!(z > 0)) {
    w = q;
    z = 0;
    for (double v : w) z += v;
  }
  const double target = u * z;
  double cum = 0, best = INFINITY;
  for (double v : w) {
    if (v <= 0) continue;
    cum += v;
    best = std::min(best, std::fabs(cum - target));
  }
  return best / z;
}

TEST(CudaS2d2, SpanVerifyKernelMatchesTheHost) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  int compared = 0, boundary = 0, mismatches = 0;
  for (int vocab : {301, 151936}) {
    for (float temperature : {0.0f, 0.7f, 1.3f}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " T " + std::to_string(temperature));
      const int rows = 24, kept = 6;
      auto q_logits = test::random_floats(size_t(rows) * vocab, rng, 3.0f);
      auto kept_logits = test::random_floats(size_t(kept) * vocab, rng, 3.0f);
      // Row 0 verifies against an identical draft row: (q - p)+ has no mass, the draw is from q.
      std::copy_n(q_logits.begin(), vocab, kept_logits.begin() + 2 * vocab);
      std::vector<int32_t> draft_rows(rows), tokens(rows);
      std::vector<float> u(rows);
      for (int r = 0; r < rows; ++r) {
        draft_rows[r] = r == 0 ? 2 : int(rng() % kept);
        tokens[r] = int(rng() % vocab);
        u[r] = float(uni(rng));
      }
      SamplerConfig s;
      s.temperature = temperature;
      s.banned_tokens = {7};
      auto dq = test::to_device(q_logits);
      auto dk = test::to_device(kept_logits);
      auto dr = test::to_device(draft_rows);
      auto dt = test::to_device(tokens);
      auto du = test::to_device(u);
      cuda::DeviceBuffer<cuda::DeviceVerifyRow> out(rows, "verify rows");
      cuda::SpanVerifyParams p;
      p.q_logits = dq.get();
      p.kept_logits = dk.get();
      p.draft_rows = dr.get();
      p.tokens = dt.get();
      p.u = du.get();
      p.rows = rows;
      p.vocab = vocab;
      p.inv_temperature = s.greedy() ? 1.0f : 1.0f / temperature;
      p.banned.ids[0] = 7;
      p.banned.n = 1;
      p.out = out.get();
      cuda::span_verify(p, nullptr);
      const auto got = test::to_host(out);
      for (int r = 0; r < rows; ++r) {
        const auto q = sampling_distribution(
            std::span<const float>(q_logits).subspan(size_t(r) * vocab, vocab), s);
        const auto pp = sampling_distribution(
            std::span<const float>(kept_logits).subspan(size_t(draft_rows[r]) * vocab, vocab), s);
        EXPECT_NEAR(got[r].q_token, q[tokens[r]], 1e-5 + 1e-4 * q[tokens[r]]) << "row " << r;
        EXPECT_NEAR(got[r].p_token, pp[tokens[r]], 1e-5 + 1e-4 * pp[tokens[r]]) << "row " << r;
        const int32_t want = residual_sample(q, pp, u[r]);
        ASSERT_NE(got[r].residual_token, 7) << "a banned id was drawn";
        ++compared;
        if (got[r].residual_token == want) continue;
        if (boundary_margin(q, pp, u[r]) < 1e-5) {
          ++boundary;
        } else {
          ++mismatches;
          ADD_FAILURE() << "row " << r << ": device drew " << got[r].residual_token << ", host "
                        << want;
        }
      }
    }
  }
  std::printf("  residual draws: %d compared, %d at a rounding boundary, %d wrong\n", compared,
              boundary, mismatches);
  EXPECT_LE(boundary, 2);
}

// Whole S2D2 generations of the parity fixtures on both backends: they must run (device
// verification included) and produce the CPU's ids, or part from them at a near-tie shown in the
// CPU's own numbers (support/decision_trace.h).
TEST(CudaS2d2, GenerationsTrackTheCpu) {
  int cases = 0, identical = 0, verified = 0;
  for (const char* name :
       {"sdar-tiny-s2d2", "fast-dllm-v2-tiny-s2d2", "llada2-tiny-s2d2", "llada2-tiny-s2d2-edit"}) {
    const auto fx =
        read_json_file(test::fixtures_dir() / "trajectories" / (std::string(name) + ".json"));
    auto model = Model::load(test::model_fixture(fx["model"]));
    auto gpu = make_cuda_backend(*model);
    auto cpu = make_cpu_backend(*model);
    EngineCore eg(*model, *gpu), ec(*model, *cpu);
    for (const auto& c : fx["cases"]) {
      SCOPED_TRACE(std::string(name) + " " + c["name"].get<std::string>());
      GenerationRequest req;
      req.prompt = c["prompt"].get<std::vector<int32_t>>();
      req.params = resolve_decode_params(model->config(), test::s2d2_params_from(c["params"]),
                                         int64_t(req.prompt.size()));
      req.stop_ids = c["params"]["stop_ids"].get<std::vector<int64_t>>();
      test::DecodeTrace tg, tc;
      const auto g = eg.generate(
          req, {}, [&](const Decoder& d, auto results) { test::record_forward(tg, d, results); });
      const auto r = ec.generate(
          req, {}, [&](const Decoder& d, auto results) { test::record_forward(tc, d, results); });
      // A prompt prefix an earlier case published: those rows' routing is in no trace.
      if (g.stats.prefix_cached_tokens > 0) test::mark_reused_prefix(tg);
      if (r.stats.prefix_cached_tokens > 0) test::mark_reused_prefix(tc);
      ++cases;
      identical += test::expect_same_or_near_tie(
          std::string(name) + " " + c["name"].get<std::string>() + " GPU vs CPU", g.ids, tg, r.ids,
          tc, req.params);
      verified += int(g.stats.speculation.verify_calls);
    }
  }
  std::printf("  S2D2 GPU generations identical to CPU: %d of %d (%d GPU verify calls)\n",
              identical, cases, verified);
  EXPECT_GE(cases, 30);
  EXPECT_GT(verified, 0);
  EXPECT_GE(identical * 10, cases * 3);
}

}  // namespace
}  // namespace dllm
