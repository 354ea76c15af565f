// Loading SDAR-VL's on-disk layout (model-specs §7): the language model as the sdar_v family,
// the vision side (config names as the published config.json spells them, every tensor found).
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/families/family.h"
#include "vision/anyres.h"
#include "vision/vision_model.h"
#include "vision_test_util.h"

namespace dllm {
namespace {

TEST(SdarVlModel, LoadsTheLanguageModelAndTheVisionTower) {
  auto model = Model::load(test::sdar_vl_fixture());
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.family, "sdar");  // the language model: SDAR's decoders and defaults
  EXPECT_EQ(model->family().name, "sdar_v");
  EXPECT_EQ(c.model_type, "sdar_v");
  EXPECT_EQ(c.architecture, "LlavaOnevisionForConditionalGeneration");
  EXPECT_EQ(c.hidden_size, 64);  // text_config
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.attention, AttentionKind::kBlockCausal);
  EXPECT_EQ(c.block_size, 4);
  EXPECT_EQ(c.mask_token_id, 290);
  EXPECT_EQ(c.stop_token_ids, (std::vector<int64_t>{250, 251}));

  auto vision = VisionModel::load(*model);
  ASSERT_TRUE(vision);
  const VisionConfig& v = vision->config;
  EXPECT_EQ(v.image_size, 384);
  EXPECT_EQ(v.patch_size, 14);
  EXPECT_EQ(v.patches_per_crop(), 729);
  EXPECT_EQ(v.pooled_side(), 14);
  EXPECT_EQ(v.hidden_size, 32);
  EXPECT_EQ(v.num_layers, 2);
  EXPECT_EQ(v.layers_to_run(), 2);
  EXPECT_EQ(v.text_hidden_size, 64);
  EXPECT_EQ(v.image_token_id, 300);
  EXPECT_EQ(v.video_token_id, 301);
  EXPECT_EQ(v.grid_pinpoints.size(), 36u);
  EXPECT_EQ(v.max_num_patches, 9);
  EXPECT_FLOAT_EQ(v.image_mean[1], 0.5f);
  EXPECT_EQ(vision->tensors.layers.size(), 2u);

  // Everything but post_layernorm (not on the vision_feature_layer -1 path) is used.
  std::set<std::string> used;
  for (const TensorEntry* t : vision->all_tensors()) used.insert(t->name);
  std::vector<std::string> unused;
  for (const std::string& name : model->unused_tensors())
    if (!used.count(name)) unused.push_back(name);
  EXPECT_EQ(unused, (std::vector<std::string>{"vision_tower.vision_model.post_layernorm.bias",
                                              "vision_tower.vision_model.post_layernorm.weight"}));
}

TEST(SdarVlModel, TextOnlyModelsHaveNoVisionSide) {
  auto model = Model::load(test::model_fixture("sdar-tiny"));
  EXPECT_EQ(VisionModel::load(*model), nullptr);
}

nlohmann::json fixture_config() {
  return read_json_file(test::sdar_vl_fixture() / "config.json");
}

void expect_vision_error(const nlohmann::json& config, const std::string& needle) {
  auto model = Model::load(test::sdar_vl_fixture());
  try {
    VisionModel::from_parts(*model, config, "config.json");
    ADD_FAILURE() << "accepted a config that should fail with: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SdarVlModel, RefusesWhatItDoesNotImplementNamingTheField) {
  auto c = fixture_config();
  c["vision_feature_select_strategy"] = "default";
  expect_vision_error(c, "vision_feature_select_strategy");
  c = fixture_config();
  c["vision_config"]["vision_use_head"] = true;
  expect_vision_error(c, "vision_use_head");
  c = fixture_config();
  c["vision_config"]["patch_size"] = 400;
  expect_vision_error(c, "patch_size");
  c = fixture_config();
  c["image_grid_pinpoints"] = nlohmann::json::array({{384, 500}});
  expect_vision_error(c, "image_grid_pinpoints");
  c = fixture_config();
  c["vision_aspect_ratio"] = "pad";
  expect_vision_error(c, "vision_aspect_ratio");
  c = fixture_config();
  c["image_token_index"] = 100000;
  expect_vision_error(c, "image_token_index");
  c = fixture_config();
  c["vision_feature_layer"] = -5;
  expect_vision_error(c, "vision_feature_layer");
  c = fixture_config();
  c.erase("vision_config");
  expect_vision_error(c, "vision_config");
}

TEST(SdarVlModel, FeatureLayerMinusTwoRunsOneLayerFewer) {
  auto model = Model::load(test::sdar_vl_fixture());
  auto c = fixture_config();
  c["vision_feature_layer"] = -2;
  auto vision = VisionModel::from_parts(*model, c, "config.json");
  EXPECT_EQ(vision->config.layers_to_run(), 1);
  EXPECT_EQ(vision->tensors.layers.size(), 1u);
}

}  // namespace
}  // namespace dllm

namespace dllm {
namespace {

// The published SDAR-VL-8B config.json (configs/sdar-vl-8b.json): every name and number read.
TEST(SdarVlModel, ParsesThePublishedEightBillionConfig) {
  const auto path = std::filesystem::path(DLLM_SOURCE_DIR) / "configs" / "sdar-vl-8b.json";
  const nlohmann::json j = read_json_file(path);
  const Family& f = find_family(j, path.string());
  EXPECT_EQ(f.name, "sdar_v");
  const ModelConfig c = f.parse_config(j, path.string());
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.block_size, 4);
  EXPECT_EQ(c.mask_token_id, 151669);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  const VisionConfig v = read_vision_config(j, c, path.string());
  EXPECT_EQ(v.image_size, 384);
  EXPECT_EQ(v.patch_size, 14);
  EXPECT_EQ(v.patches_per_crop(), 729);
  EXPECT_EQ(v.hidden_size, 1152);
  EXPECT_EQ(v.intermediate_size, 4304);
  EXPECT_EQ(v.num_layers, 27);
  EXPECT_EQ(v.num_heads, 16);
  EXPECT_EQ(v.layers_to_run(), 27);
  EXPECT_EQ(v.text_hidden_size, 4096);
  EXPECT_EQ(v.image_token_id, 151655);
  EXPECT_EQ(v.video_token_id, 151656);
  EXPECT_EQ(v.grid_pinpoints.size(), 36u);
  EXPECT_EQ(v.grid_pinpoints.back(), (std::pair<int64_t, int64_t>{2304, 2304}));
  EXPECT_EQ(v.max_num_patches, 9);
  // Token counts as LlavaOnevisionProcessor writes them: a 384² image is the base crop plus one
  // tile (27 rows of 27 + newline); a 4-frame video 4 x 196 + 1.
  EXPECT_EQ(image_token_count({384, 384}, v), 729 + 27 * 28);
  EXPECT_EQ(video_token_count(4, v), 785);
}

}  // namespace
}  // namespace dllm
