// S2D2's SpanVerify contract on the CPU backend: a draft forward keeps its rows, a verify forward
// returns q(x), p(x) and the residual draw per row — equal to computing them from the logits of
// the same two forwards — and malformed verify requests fail with a message naming the field.
#include <gtest/gtest.h>

#include <numeric>

#include "backend/backend.h"
#include "core/error.h"
#include "decode/s2d2_verify.h"
#include "decode/token_stats.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

SequenceForward rows_request(KvCache* cache, MethodState* state, std::vector<int32_t> ids,
                             int32_t first_pos) {
  SequenceForward f;
  f.cache = cache;
  f.state = state;
  f.tokens = std::move(ids);
  for (size_t i = 0; i < f.tokens.size(); ++i)
    f.positions.push_back(first_pos + static_cast<int32_t>(i));
  f.rule = AttentionRule::bidirectional();
  f.output_rows.resize(f.tokens.size());
  std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
  f.want_logits = true;
  return f;
}

TEST(SpanVerify, RowsEqualTheHostComputationOnTheForwardsLogits) {
  auto model = Model::load(test::model_fixture("sdar-tiny"));
  auto cpu = make_cpu_backend(*model);
  const int64_t vocab = model->config().vocab_size;
  for (const float temperature : {0.0f, 0.7f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    auto cache = cpu->create_cache(16);
    auto state = cpu->create_method_state();
    SequenceForward draft = rows_request(cache.get(), state.get(), {5, 17, 42, 7}, 0);
    draft.retain_logits = true;
    draft.sampler.temperature = temperature;
    draft.sampler.top_k = temperature > 0 ? 20 : 0;
    const auto d = cpu->forward(std::span(&draft, 1))[0];

    SequenceForward ver = rows_request(cache.get(), state.get(), {9, 11, 13}, 0);
    ver.sampler = draft.sampler;
    SpanVerify v;
    v.draft_rows = {2, 0, 3};
    v.draft_tokens = {42, 3, 250};
    v.residual_u = {0.1, 0.5, 0.95};
    ver.verify = v;
    const auto r = cpu->forward(std::span(&ver, 1))[0];
    ASSERT_EQ(r.verify_rows.size(), 3u);
    const size_t n = static_cast<size_t>(vocab);
    for (size_t i = 0; i < 3; ++i) {
      const auto q = sampling_distribution(std::span(r.logits).subspan(i * n, n), draft.sampler);
      const auto p = sampling_distribution(
          std::span(d.logits).subspan(static_cast<size_t>(v.draft_rows[i]) * n, n), draft.sampler);
      const size_t x = static_cast<size_t>(v.draft_tokens[i]);
      EXPECT_EQ(r.verify_rows[i].q_token, q[x]);
      EXPECT_EQ(r.verify_rows[i].p_token, p[x]);
      EXPECT_EQ(r.verify_rows[i].residual_token, residual_sample(q, p, v.residual_u[i]));
    }
  }
}

TEST(SpanVerify, MalformedRequestsNameTheField) {
  auto model = Model::load(test::model_fixture("sdar-tiny"));
  auto cpu = make_cpu_backend(*model);
  auto cache = cpu->create_cache(16);
  auto state = cpu->create_method_state();
  SequenceForward draft = rows_request(cache.get(), state.get(), {5, 17}, 0);
  draft.retain_logits = true;
  cpu->forward(std::span(&draft, 1));
  auto expect_error = [&](SpanVerify v, const std::string& what) {
    SequenceForward f = rows_request(cache.get(), state.get(), {9, 11}, 0);
    f.verify = std::move(v);
    try {
      cpu->forward(std::span(&f, 1));
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error({{0}, {1, 2}, {0.1, 0.2}}, "draft rows");           // sizes disagree
  expect_error({{0, 5}, {1, 2}, {0.1, 0.2}}, "draft row 5");       // not kept
  expect_error({{0, 1}, {1, -2}, {0.1, 0.2}}, "draft token -2");   // outside the vocabulary
  expect_error({{0, 1}, {1, 2}, {0.1, 1.0}}, "residual uniform");  // u must be < 1
  SequenceForward no_state = rows_request(cache.get(), nullptr, {9}, 0);
  no_state.retain_logits = true;
  EXPECT_THROW(cpu->forward(std::span(&no_state, 1)), Error);
}

}  // namespace
}  // namespace dllm
