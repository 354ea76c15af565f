// Random weights of a vision-language shape (vision/random_vision.h): every tensor the real
// on-disk layout has (the fixture checkpoint written by tools/make_sdar_vl_fixture.py), drawn
// reproducibly, and an engine on --random-weights of that shape runs image requests.
#include <gtest/gtest.h>

#include "core/dtype.h"
#include "dllm/engine.h"
#include "io/json_file.h"
#include "vision/random_vision.h"
#include "vision_test_util.h"

namespace dllm {
namespace {

nlohmann::json fixture_config() {
  return read_json_file(test::sdar_vl_fixture() / "config.json");
}

std::vector<float> values(const TensorEntry& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(*t.dtype, t.data, out.data(), out.size());
  return out;
}

TEST(RandomVisionModel, HasEveryTensorOfTheCheckpointLayout) {
  const auto random = make_random_vision_language_model(fixture_config(), 7);
  ASSERT_TRUE(random.vision);
  auto real_model = Model::load(test::sdar_vl_fixture());
  const auto real = VisionModel::load(*real_model);
  const auto ours = random.vision->all_tensors();
  const auto theirs = real->all_tensors();
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_EQ(ours[i]->shape, theirs[i]->shape) << i;
  EXPECT_EQ(random.vision->parameter_count(), real->parameter_count());
  EXPECT_EQ(random.model->config().hidden_size, real_model->config().hidden_size);
}

TEST(RandomVisionModel, SameSeedSameWeightsAndTextShapesHaveNoVisionSide) {
  const auto a = make_random_vision_language_model(fixture_config(), 7);
  const auto b = make_random_vision_language_model(fixture_config(), 7);
  const auto c = make_random_vision_language_model(fixture_config(), 8);
  const auto wa = values(*a.vision->tensors.layers[0].fc1_w);
  EXPECT_EQ(wa, values(*b.vision->tensors.layers[0].fc1_w));
  EXPECT_NE(wa, values(*c.vision->tensors.layers[0].fc1_w));
  double sq = 0;
  for (float v : wa) sq += double(v) * v;
  // Projections ~ 1/sqrt(fan_in): unit-variance rows after the matmul, not zeros.
  EXPECT_NEAR(sq / wa.size() * a.vision->config.hidden_size, 1.0, 0.2);

  const auto text = make_random_vision_language_model(
      read_json_file(test::model_fixture("sdar-tiny") / "config.json"), 7);
  EXPECT_TRUE(text.model);
  EXPECT_FALSE(text.vision);
}

TEST(RandomVisionModel, EngineOnRandomWeightsRunsAnImageRequest) {
  const auto dir = test::sdar_vl_fixture();
  EngineConfig config;
  config.model = dir.string();  // the tokenizer
  config.device = "cpu";
  config.random_weights = (dir / "config.json").string();
  Engine engine(config);
  Request r;
  r.prompt_ids = {5, 300, 6};  // 300: <|image_pad|> in the fixture's config
  r.image_files = {(dir / "images" / "square.png").string()};
  r.max_tokens = 4;
  r.ignore_eos = true;
  const RequestResult out = engine.generate(r);
  ASSERT_EQ(out.finish_reason, "length") << out.error;
  EXPECT_GT(out.stats.prompt_tokens, 729);  // the base crop's features at least
  EXPECT_EQ(out.token_ids.size(), 4u);
}

}  // namespace
}  // namespace dllm
