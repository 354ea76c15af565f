// Tensor parallel on the CPU (issue 27): each rank's Model::shard run by its own CpuBackend on
// its own thread, the partial sums after o and down joined by a thread all-reduce, gives the
// whole model's logits — the layer-by-layer semantics the NCCL path on the GPU follows.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/thread_all_reduce.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/layer_desc.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/tensor_parallel_plan.h"
#include "support/rel_error.h"
#include "support/tensor_parallel_forwards.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

const std::vector<int32_t> kPrompt = {3, 99, 17, 250, 5, 8, 41, 7};
const std::vector<int32_t> kBlock = {12, 290, 290, 64};

// A prefill that writes the cache, then a block attending it: both forwards' logits.
std::vector<float> prefill_then_block(Backend& backend) {
  auto cache = backend.create_cache(32);
  SequenceForward pre = test::logit_rows(kPrompt, 0);
  pre.cache = cache.get();
  pre.write = CacheWrite::kAppend;
  std::vector<float> out = backend.forward(std::span(&pre, 1))[0].logits;
  SequenceForward block = test::logit_rows(kBlock, static_cast<int32_t>(kPrompt.size()));
  block.cache = cache.get();
  const std::vector<float> second = backend.forward(std::span(&block, 1))[0].logits;
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

// Every rank's logits, each rank on its own thread.
std::vector<std::vector<float>> ranks_logits(const Model& whole, int world, MoeSplit split) {
  const auto layers = describe_layers(whole.config());
  std::vector<std::unique_ptr<Model>> shards;
  std::vector<std::unique_ptr<cpu_backend::CpuBackend>> backends;
  cpu_backend::ThreadAllReduce all_reduce(world);
  for (int r = 0; r < world; ++r) {
    shards.push_back(Model::shard(
        whole, plan_tensor_parallel(layers, whole.config().vocab_size, r, world, split)));
    backends.push_back(std::make_unique<cpu_backend::CpuBackend>(*shards.back()));
    backends.back()->set_partial_sum_reduce(
        [&all_reduce, r](float* data, int64_t count) { all_reduce(r, data, count); });
  }
  std::vector<std::vector<float>> logits(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] { logits[r] = prefill_then_block(*backends[r]); });
  for (auto& t : threads) t.join();
  return logits;
}

struct Case {
  const char* fixture;
  int world;
  MoeSplit split = MoeSplit::kExpertFeatures;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.fixture << " at TP " << c.world
      << (c.split == MoeSplit::kExperts ? " expert-parallel" : "");
}

class TensorParallelForward : public ::testing::TestWithParam<Case> {};

// Each rank's slice of every row (its LM head's vocabulary ids, in rank order) side by side.
std::vector<float> joined_slices(const std::vector<std::vector<float>>& ranks, size_t rows) {
  std::vector<float> out;
  for (size_t i = 0; i < rows; ++i)
    for (const auto& slice : ranks) {
      const size_t w = slice.size() / rows;
      out.insert(out.end(), slice.begin() + static_cast<std::ptrdiff_t>(i * w),
                 slice.begin() + static_cast<std::ptrdiff_t>((i + 1) * w));
    }
  return out;
}

TEST_P(TensorParallelForward, RanksGiveTheWholeModelsLogits) {
  const auto model = Model::load(test::model_fixture(GetParam().fixture));
  const std::vector<float> whole = prefill_then_block(*make_cpu_backend(*model));
  const auto ranks = ranks_logits(*model, GetParam().world, GetParam().split);
  const int64_t vocab = model->config().vocab_size;
  const size_t rows = whole.size() / static_cast<size_t>(vocab);
  for (size_t r = 0; r < ranks.size(); ++r) {  // the plan's split: vocab / world ids a rank
    const int64_t width = vocab / GetParam().world + (int64_t(r) < vocab % GetParam().world);
    EXPECT_EQ(ranks[r].size(), rows * static_cast<size_t>(width)) << "rank " << r;
  }
  // Only the order of the partial sums differs from the whole model's GEMMs.
  const std::vector<float> joined = joined_slices(ranks, rows);
  ASSERT_EQ(joined.size(), whole.size());
  EXPECT_LT(test::rel_error(joined, whole), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Families, TensorParallelForward,
    ::testing::Values(Case{"sdar-tiny", 1}, Case{"sdar-tiny", 2},
                      Case{"sdar-tiny", 4},          // 1 query head a rank, KV heads replicated
                      Case{"fast-dllm-v2-tiny", 2},  // q/k/v biases
                      Case{"llada-tiny", 2}, Case{"llada-tiny", 4}, Case{"dream-tiny", 2},
                      // MoE (tensor parallel inside every expert and the shared expert), a fused
                      // query_key_value, partial rotary; at TP 4 KV heads replicated
                      Case{"llada2-tiny", 2}, Case{"llada2-tiny", 4},
                      // MoE split by expert (8 and 4 of the 16 whole experts a rank)
                      Case{"llada2-tiny", 2, MoeSplit::kExperts},
                      Case{"llada2-tiny", 4, MoeSplit::kExperts}),
    [](const auto& info) {
      std::string name = std::string(info.param.fixture) + "_tp" +
                         std::to_string(info.param.world) +
                         (info.param.split == MoeSplit::kExperts ? "_ep" : "");
      for (char& ch : name)
        if (ch == '-') ch = '_';
      return name;
    });

TEST(TensorParallelShard, RankHoldsItsSlices) {
  const auto model = Model::load(test::model_fixture("sdar-tiny"));
  const ModelConfig& c = model->config();
  const auto plan = plan_tensor_parallel(describe_layers(c), c.vocab_size, 1, 2);
  const auto rank = Model::shard(*model, plan);
  EXPECT_EQ(rank->config().num_heads, c.num_heads / 2);
  EXPECT_EQ(rank->config().num_kv_heads, c.num_kv_heads / 2);
  EXPECT_EQ(rank->config().intermediate_size, c.intermediate_size / 2);
  const TensorEntry& q = *rank->tensors().layers[0].q;
  const TensorEntry& whole_q = *model->tensors().layers[0].q;
  const size_t row_bytes = whole_q.nbytes / static_cast<size_t>(whole_q.shape[0]);
  // Rank 1 of 2 holds the second half of q's rows: its heads.
  ASSERT_EQ(q.nbytes, whole_q.nbytes / 2);
  EXPECT_TRUE(std::equal(q.data, q.data + q.nbytes,
                         whole_q.data + static_cast<size_t>(whole_q.shape[0] / 2) * row_bytes));
  // o: rank 1's columns of every row.
  const TensorEntry& o = *rank->tensors().layers[0].o;
  const TensorEntry& whole_o = *model->tensors().layers[0].o;
  EXPECT_EQ(o.shape, (std::vector<int64_t>{whole_o.shape[0], whole_o.shape[1] / 2}));
}

// The LM head by vocabulary: rank r holds the rows of its ids — a copy of the embedding's rows
// where the checkpoint ties them (Fast-dLLM v2), the embedding itself staying whole.
TEST(TensorParallelShard, RankHoldsItsVocabularyRowsOfTheLmHead) {
  for (const char* fixture : {"sdar-tiny", "fast-dllm-v2-tiny"}) {
    SCOPED_TRACE(fixture);
    const auto model = Model::load(test::model_fixture(fixture));
    const ModelConfig& c = model->config();
    const auto plan = plan_tensor_parallel(describe_layers(c), c.vocab_size, 1, 2);
    const auto rank = Model::shard(*model, plan);
    EXPECT_TRUE(rank->lm_head_is_vocab_slice());
    EXPECT_EQ(rank->lm_head_vocab_begin(), plan.vocab.begin);
    EXPECT_EQ(rank->lm_head_vocab_count(), plan.vocab.count);
    EXPECT_EQ(rank->tensors().embed->shape[0], c.vocab_size) << "the embedding stays whole";
    const TensorEntry& head = *rank->tensors().lm_head;
    const TensorEntry& whole = *model->tensors().lm_head;
    const size_t row_bytes = whole.nbytes / static_cast<size_t>(whole.shape[0]);
    ASSERT_EQ(head.nbytes, static_cast<size_t>(plan.vocab.count) * row_bytes);
    EXPECT_TRUE(std::equal(head.data, head.data + head.nbytes,
                           whole.data + static_cast<size_t>(plan.vocab.begin) * row_bytes));
  }
  // A group of one keeps the whole head, tied as the checkpoint has it.
  const auto tied = Model::load(test::model_fixture("fast-dllm-v2-tiny"));
  const auto one = Model::shard(*tied, plan_tensor_parallel(describe_layers(tied->config()),
                                                            tied->config().vocab_size, 0, 1));
  EXPECT_FALSE(one->lm_head_is_vocab_slice());
  EXPECT_EQ(one->tensors().lm_head, one->tensors().embed);
}

TEST(TensorParallelShard, MoeRankHoldsItsExpertFeaturesAndFusedQkvRows) {
  const auto model = Model::load(test::model_fixture("llada2-tiny"));
  const ModelConfig& c = model->config();
  const auto plan = plan_tensor_parallel(describe_layers(c), c.vocab_size, 1, 2);
  const auto rank = Model::shard(*model, plan);
  EXPECT_EQ(rank->config().moe.expert_intermediate_size, c.moe.expert_intermediate_size / 2);
  EXPECT_EQ(rank->config().moe.num_experts, c.moe.num_experts) << "every rank holds every expert";
  const int64_t moe_layer = c.moe.first_dense_layers;
  const LayerTensors& l = rank->tensors().layers[static_cast<size_t>(moe_layer)];
  const LayerTensors& whole = model->tensors().layers[static_cast<size_t>(moe_layer)];
  // Expert 3's gate: the second half of its rows.
  const TensorEntry& g = *l.experts[3].gate;
  const TensorEntry& wg = *whole.experts[3].gate;
  ASSERT_EQ(g.nbytes, wg.nbytes / 2);
  EXPECT_TRUE(std::equal(g.data, g.data + g.nbytes, wg.data + wg.nbytes / 2));
  // The fused projection: rank 1's Q rows, then its K rows, then its V rows.
  const TensorEntry& qkv = *l.qkv;
  const TensorEntry& wqkv = *whole.qkv;
  const size_t row = wqkv.nbytes / static_cast<size_t>(wqkv.shape[0]);
  const int64_t hd = c.head_dim, q_rows = c.num_heads * hd, kv_rows = c.num_kv_heads * hd;
  ASSERT_EQ(qkv.shape[0], (q_rows + 2 * kv_rows) / 2);
  const unsigned char* k_part = qkv.data + static_cast<size_t>(q_rows / 2) * row;
  EXPECT_TRUE(std::equal(k_part, k_part + static_cast<size_t>(kv_rows / 2) * row,
                         wqkv.data + static_cast<size_t>(q_rows + kv_rows / 2) * row));
}

TEST(TensorParallelShard, ExpertParallelRankHoldsItsWholeExperts) {
  const auto model = Model::load(test::model_fixture("llada2-tiny"));
  const ModelConfig& c = model->config();
  const auto plan =
      plan_tensor_parallel(describe_layers(c), c.vocab_size, 1, 2, MoeSplit::kExperts);
  const auto rank = Model::shard(*model, plan);
  const MoeConfig& m = rank->config().moe;
  EXPECT_EQ(m.num_experts, c.moe.num_experts) << "the router still scores every expert";
  EXPECT_EQ(m.first_held_expert, c.moe.num_experts / 2);
  EXPECT_EQ(m.held_count(), c.moe.num_experts / 2);
  EXPECT_EQ(m.expert_intermediate_size, c.moe.expert_intermediate_size);
  const int64_t moe_layer = c.moe.first_dense_layers;
  const LayerTensors& l = rank->tensors().layers[static_cast<size_t>(moe_layer)];
  const LayerTensors& whole = model->tensors().layers[static_cast<size_t>(moe_layer)];
  ASSERT_EQ(l.experts.size(), static_cast<size_t>(c.moe.num_experts / 2));
  // Its first expert is the whole model's expert num_experts / 2, all of its rows.
  const TensorEntry& d = *l.experts[0].down;
  const TensorEntry& wd = *whole.experts[static_cast<size_t>(c.moe.num_experts / 2)].down;
  ASSERT_EQ(d.nbytes, wd.nbytes);
  EXPECT_TRUE(std::equal(d.data, d.data + d.nbytes, wd.data));
  EXPECT_EQ(d.data, wd.data) << "whole rows are a view of the whole model's tensor, not a copy";
  // The shared expert still splits by feature.
  EXPECT_EQ(l.shared.gate->shape[0], whole.shared.gate->shape[0] / 2);
}

// A random model too large for host memory (LLaDA2.0-flash for the bench) keeps one buffer per
// tensor kind; it shards and computes like any model.
TEST(TensorParallelShard, RandomWeightsSharedByShapeShardLikeAnyModel) {
  const auto config = read_json_file(test::model_fixture("llada2-tiny") / "config.json");
  const auto model = make_random_model(config, 7, {}, RandomWeightStorage::kSharedByShape);
  const LayerTensors& l = model->tensors().layers.back();
  EXPECT_EQ(l.experts[0].gate->data, l.experts[5].gate->data) << "one buffer per kind";
  EXPECT_NE(l.experts[0].gate->data, l.experts[0].down->data);
  const std::vector<float> whole = prefill_then_block(*make_cpu_backend(*model));
  for (const float v : whole) ASSERT_TRUE(std::isfinite(v));
  const auto ranks = ranks_logits(*model, 2, MoeSplit::kExperts);
  EXPECT_LT(test::rel_error(joined_slices(ranks, whole.size() / model->config().vocab_size), whole),
            1e-5);
}

}  // namespace
}  // namespace dllm
