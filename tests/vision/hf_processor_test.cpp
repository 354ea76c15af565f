// The C++ LLaVA-OneVision processor against transformers' own (tools/compare_hf_processor.py ->
// hf_processor.json): the torchvision image processor (LlavaOnevisionImageProcessorFast in the
// transformers 4.52.4 SDAR-VL pins; its preprocessor_config.json names it) and the video
// processor on the fixture's images (wide, tall, square, grey, alpha, a 13-crop large one) and
// its video. Per image the crop count and the <|image_pad|> count (LlavaOnevisionProcessor's
// _get_number_of_features: anyres tiles, unpadding, anyres_max_9, image_newline); per crop and
// channel the sum and the sum of squares of the normalised pixels, which one pixel one level off
// (2/255) would move past the tolerance.
#include <gtest/gtest.h>

#include "vision/image_decode.h"
#include "vision/image_processor.h"
#include "vision/video_decode.h"
#include "vision_test_util.h"

namespace dllm {
namespace {

nlohmann::json hf_processor() {
  return read_json_file(test::sdar_vl_fixture() / "hf_processor.json");
}

// Sums of 384² float32 values, each within an ulp or two of transformers' (the order of the
// rescale and normalise operations differs): far below one pixel one level off (0.0078).
constexpr double kSumTolerance = 2e-3;

void expect_crop_stats(const PixelCrops& crops, const nlohmann::json& stats,
                       const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(crops.crops), stats.size()) << what;
  const size_t plane = static_cast<size_t>(crops.side * crops.side);
  for (size_t c = 0; c < stats.size(); ++c)
    for (size_t ch = 0; ch < 3; ++ch) {
      const float* p = &crops.values[(c * 3 + ch) * plane];
      double sum = 0, squares = 0;
      for (size_t i = 0; i < plane; ++i) {
        sum += p[i];
        squares += double(p[i]) * p[i];
      }
      EXPECT_NEAR(sum, stats[c][ch][0].get<double>(), kSumTolerance)
          << what << " crop " << c << " channel " << ch;
      EXPECT_NEAR(squares, stats[c][ch][1].get<double>(), kSumTolerance)
          << what << " crop " << c << " channel " << ch;
    }
}

class HfProcessor : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::sdar_vl_fixture());
    vision_ = VisionModel::load(*model_);
    hf_ = hf_processor();
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<VisionModel> vision_;
  nlohmann::json hf_;
};

TEST_F(HfProcessor, ImageTokenCountsAreTheProcessors) {
  ASSERT_GE(hf_["images"].size(), 6u);
  for (const auto& [name, info] : hf_["images"].items()) {
    const Size2 size{info["height"].get<int64_t>(), info["width"].get<int64_t>()};
    EXPECT_EQ(image_token_count(size, vision_->config), info["tokens"].get<int64_t>()) << name;
  }
}

TEST_F(HfProcessor, ImageCropsMatchTheTorchvisionProcessor) {
  for (const auto& [name, info] : hf_["images"].items()) {
    const RgbImage img = read_image_file(test::sdar_vl_fixture() / info["file"].get<std::string>());
    ASSERT_EQ(img.height, info["height"].get<int64_t>()) << name;
    const PixelCrops crops = preprocess_image(img, vision_->config);
    EXPECT_EQ(crops.crops, info["torchvision"]["crops"].get<int64_t>()) << name;
    expect_crop_stats(crops, info["torchvision"]["stats"], name);
  }
}

TEST_F(HfProcessor, VideoFramesMatchTheVideoProcessor) {
  const auto& v = hf_["video"];
  const DecodedVideo video = read_video_file(
      test::sdar_vl_fixture() / v["file"].get<std::string>(), v["frames"].get<int64_t>());
  EXPECT_EQ(video.indices, v["indices"].get<std::vector<int64_t>>());
  expect_crop_stats(preprocess_frames(video.frames, vision_->config), v["torchvision"]["stats"],
                    "video");
  EXPECT_EQ(video_token_count(static_cast<int64_t>(video.frames.size()), vision_->config),
            v["tokens"].get<int64_t>());
}

}  // namespace
}  // namespace dllm
