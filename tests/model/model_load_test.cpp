// Loading checkpoints: configs of every family normalise correctly; bad checkpoints fail with an
// error naming the file and the field or tensor.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "core/error.h"
#include "io/json_file.h"
#include "model/model.h"
#include "support/safetensors_writer.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

namespace fs = std::filesystem;

template <class F>
void expect_error(F f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning " << *needles.begin();
  } catch (const Error& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

// A copy of a fixture we can damage.
fs::path copy_fixture(const std::string& name) {
  const auto dir = test::temp_dir("model-" + name);
  fs::copy(test::model_fixture(name), dir,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return dir;
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto j = read_json_file(dir / "config.json");
  edit(j);
  std::ofstream(dir / "config.json") << j.dump(2);
}

TEST(ModelLoad, NormalisesEveryFamily) {
  struct Expect {
    std::string dir, family;
    AttentionKind attention;
    int64_t block;
    bool shifted, qk_norm, bias, tied;
    int64_t mask, heads, kv_heads, head_dim;
  };
  const std::vector<Expect> expects = {
      {"sdar-tiny", "sdar", AttentionKind::kBlockCausal, 4, false, true, false, false, 290, 4, 2,
       32},
      {"wedlm-qwen3-tiny", "wedlm", AttentionKind::kCausal, 0, false, true, false, false, 291, 8, 2,
       16},
      {"wedlm-qwen25-tiny", "wedlm", AttentionKind::kCausal, 0, false, false, true, false, 291, 7,
       1, 16},
      {"fast-dllm-v2-tiny", "fast_dllm_v2", AttentionKind::kBlockCausal, 32, true, false, true,
       true, 292, 4, 2, 16},
      {"dream-tiny", "dream", AttentionKind::kBidirectional, 0, true, false, true, false, 293, 6, 2,
       16},
      {"llada-tiny", "llada", AttentionKind::kBidirectional, 0, false, false, false, false, 294, 4,
       4, 16},
  };
  for (const auto& e : expects) {
    SCOPED_TRACE(e.dir);
    auto m = Model::load(test::model_fixture(e.dir));
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.family, e.family);
    EXPECT_EQ(c.attention, e.attention);
    EXPECT_EQ(c.block_size, e.block);
    EXPECT_EQ(c.shifted_logits, e.shifted);
    EXPECT_EQ(c.qk_norm, e.qk_norm);
    EXPECT_EQ(c.qkv_bias, e.bias);
    EXPECT_EQ(c.tied_embeddings, e.tied);
    EXPECT_EQ(c.mask_token_id, e.mask);
    EXPECT_EQ(c.num_heads, e.heads);
    EXPECT_EQ(c.num_kv_heads, e.kv_heads);
    EXPECT_EQ(c.head_dim, e.head_dim);
    EXPECT_EQ(c.rotary_dim, c.head_dim);
    EXPECT_GT(m->parameter_count(), 10000);
    EXPECT_TRUE(m->unused_tensors().empty());
  }
  auto sdar = Model::load(test::model_fixture("sdar-tiny"));
  EXPECT_EQ(sdar->config().stop_token_ids, (std::vector<int64_t>{250, 251}));
  auto llada = Model::load(test::model_fixture("llada-tiny"));
  EXPECT_DOUBLE_EQ(llada->config().rope_theta, 5e5);
  EXPECT_DOUBLE_EQ(llada->config().norm_eps, 1e-5);
}

TEST(ModelLoad, MissingTensorIsNamed) {
  const auto dir = copy_fixture("llada-tiny");
  test::write_file(dir / "model.safetensors",
                   test::safetensors_bytes({test::f32_tensor("x", {1}, {1})}));
  expect_error([&] { Model::load(dir); }, {"missing tensor 'model.transformer.wte.weight'"});
}

TEST(ModelLoad, WrongShapeIsNamed) {
  const auto dir = copy_fixture("sdar-tiny");
  edit_config(dir, [](auto& j) { j["intermediate_size"] = 100; });
  expect_error([&] { Model::load(dir); }, {"model.layers.", "mlp.", "[96, 64]", "[100, 64]"});
}

TEST(ModelLoad, UnknownAndUnsupportedArchitectures) {
  const auto dir = copy_fixture("dream-tiny");
  edit_config(dir, [](auto& j) {
    j["model_type"] = "mamba";
    j["architectures"] = {"MambaForCausalLM"};
  });
  expect_error([&] { Model::load(dir); }, {"config.json", "unknown architecture", "mamba", "sdar"});
}

// LLaDA2.x: the published config keys and tensor names (fused QKV, MoE layers past the first
// dense one), and MoE sizes that do not fit together named with their key.
TEST(ModelLoad, Llada2MoeCheckpoint) {
  auto model = Model::load(test::model_fixture("llada2-tiny"));
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.family, "llada2_moe");
  EXPECT_TRUE(c.fused_qkv);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.rotary_dim, c.head_dim / 2);
  EXPECT_EQ(c.block_size, 32);
  EXPECT_EQ(c.attention, AttentionKind::kBlockCausal);
  EXPECT_EQ(c.moe.num_experts, 16);
  EXPECT_EQ(c.moe.experts_per_token, 4);
  EXPECT_EQ(c.moe.num_groups, 4);
  EXPECT_EQ(c.moe.groups_per_token, 2);
  EXPECT_TRUE(c.moe.expert_bias);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 2.5);
  const auto& layers = model->tensors().layers;
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_NE(layers[0].gate, nullptr);  // first_k_dense_replace = 1
  EXPECT_TRUE(layers[0].experts.empty());
  EXPECT_EQ(layers[1].gate, nullptr);
  EXPECT_EQ(layers[1].experts.size(), 16u);
  EXPECT_NE(layers[1].shared.down, nullptr);
  EXPECT_TRUE(model->unused_tensors().empty());
  // weight_elements() (the memory bound checked before loading) also counts q/k/v biases, which
  // this checkpoint does not have; everything else is the same count.
  EXPECT_EQ(model->parameter_count(), c.weight_elements() - 3 * (c.q_dim() + 2 * c.kv_dim()));
}

// Benchmark floors count the routed experts a forward can touch: none at 0 rows, k of E per
// row, all of them for many rows, or a measured count; dense models always read every parameter.
TEST(ModelLoad, ParametersReadCountTouchedExperts) {
  auto model = Model::load(test::model_fixture("llada2-tiny"));
  const ModelConfig& c = model->config();
  const double all = double(model->parameter_count());
  double routed = 0;  // every routed expert's parameters, from the tensors
  for (const auto& layer : model->tensors().layers)
    for (const auto& e : layer.experts)
      routed += double(e.gate->numel() + e.up->numel() + e.down->numel());
  ASSERT_GT(routed, 0);
  const double k_of_e = double(c.moe.experts_per_token) / double(c.moe.num_experts);
  EXPECT_DOUBLE_EQ(model->parameters_read(0), all - routed);
  EXPECT_DOUBLE_EQ(model->parameters_read(1), all - routed * (1 - k_of_e));
  EXPECT_DOUBLE_EQ(model->parameters_per_row(), all - routed * (1 - k_of_e));
  EXPECT_NEAR(model->parameters_read(10000), all, 1e-6 * all);
  EXPECT_LT(model->parameters_read(2), model->parameters_read(3));
  // A measured count of experts touched per MoE layer replaces the uniform-routing estimate.
  const double experts = double(c.moe.num_experts), k = double(c.moe.experts_per_token);
  EXPECT_DOUBLE_EQ(model->parameters_read(64, 0.0), all - routed);
  EXPECT_DOUBLE_EQ(model->parameters_read(64, k), model->parameters_read(1));
  EXPECT_DOUBLE_EQ(model->parameters_read(1, experts), all);
  EXPECT_DOUBLE_EQ(model->parameters_read(1, 2 * experts), all);  // clamped to every expert

  auto dense = Model::load(test::models_dir() / "tiny-block");
  EXPECT_EQ(dense->parameters_read(1), double(dense->parameter_count()));
  EXPECT_EQ(dense->parameters_read(1, 3.0), double(dense->parameter_count()));
  EXPECT_EQ(dense->parameters_per_row(), double(dense->parameter_count()));
}

TEST(ModelLoad, Llada2MoeBadSizesAreNamed) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](auto& j) { j["n_group"] = 3; }, "num_experts (16) is not a multiple of n_group (3)"},
      {[](auto& j) { j["n_group"] = 16; }, "at least 2 are needed"},
      {[](auto& j) { j["topk_group"] = 5; }, "topk_group is 5, outside the accepted range 1..4"},
      {[](auto& j) { j["num_experts_per_tok"] = 9; }, "num_experts_per_tok is 9"},
      {[](auto& j) { j["score_function"] = "softmax"; }, "router score 'softmax'"},
      {[](auto& j) { j["use_qkv_bias"] = true; }, "'use_qkv_bias'"},
      {[](auto& j) { j["routed_scaling_factor"] = -1; }, "'routed_scaling_factor'"},
      {[](auto& j) { j["moe_intermediate_size"] = 8; }, "mlp.experts.0.gate_proj.weight"},
  };
  for (const auto& [edit, needle] : edits) {
    const auto dir = copy_fixture("llada2-tiny");
    edit_config(dir, edit);
    expect_error([&] { Model::load(dir); }, {needle});
  }
}

TEST(ModelLoad, BadConfigFieldsAreNamed) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](auto& j) { j["hidden_size"] = "64"; }, "'hidden_size' must be an integer"},
      {[](auto& j) { j.erase("num_hidden_layers"); }, "missing field 'num_hidden_layers'"},
      {[](auto& j) { j["num_key_value_heads"] = 3; }, "not a multiple of num_key_value_heads"},
      {[](auto& j) {
         j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4}};
       },
       "RoPE scaling type 'longrope'"},
      {[](auto& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 0.5}};
       },
       "field 'factor' is 0.5, outside the accepted range"},
      {[](auto& j) {
         j["rope_scaling"] = {{"rope_type", "linear"}};
       },
       "missing field 'factor'"},
      {[](auto& j) { j["mask_token_id"] = 100000; },
       "mask_token_id 100000 is outside the vocabulary"},
      {[](auto& j) { j["hidden_act"] = "gelu"; }, "activation 'gelu'"},
      {[](auto& j) { j["block_size"] = 0; }, "field 'block_size' is 0, outside the accepted range"},
  };
  for (const auto& [edit, needle] : edits) {
    SCOPED_TRACE(needle);
    const auto dir = copy_fixture("sdar-tiny");
    edit_config(dir, edit);
    expect_error([&] { Model::load(dir); }, {"config.json", needle});
  }
  const auto dir = copy_fixture("sdar-tiny");
  std::ofstream(dir / "config.json") << "{\"model_type\": ";
  expect_error([&] { Model::load(dir); }, {"config.json", "invalid JSON"});
  fs::remove(dir / "config.json");
  expect_error([&] { Model::load(dir); }, {"no config.json"});
  expect_error([&] { Model::load(dir / "nope"); }, {"not a model directory"});
}

TEST(ModelLoad, CorruptShardIsNamed) {
  const auto dir = copy_fixture("sdar-tiny");
  const auto shard = dir / "model-00002-of-00002.safetensors";
  const auto size = fs::file_size(shard);
  fs::resize_file(shard, size - 100);
  expect_error([&] { Model::load(dir); }, {"model-00002-of-00002.safetensors", "past the end"});
}

}  // namespace
}  // namespace dllm
