// The C++ LLaVA-OneVision processor against transformers' own (tools/compare_hf_processor.py ->
// hf_processor.json): the torchvision image processor (LlavaOnevisionImageProcessorFast in the
// transformers 4.52.4 SDAR-VL pins; its preprocessor_config.json names it) and the video
// processor on the fixture's images (wide, tall, square, grey, alpha, a 13-crop large one) and
// its video. Per image the crop count and the <|image_pad|> count (LlavaOnevisionProcessor's
// _get_number_of_features: anyres tiles, unpadding, anyres_max_9, image_newline); per crop and
// channel exact checksums of the pixel levels. (Its PIL processor differs from both by a level
// or two on 0.2-2% of the values: hf_processor.json's backend_* fields.)
#include <gtest/gtest.h>

#include <cmath>

#include "support/video_refusal.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"
#include "vision/video_decode.h"
#include "vision_test_util.h"

namespace dllm {
namespace {

nlohmann::json hf_processor() {
  return read_json_file(test::sdar_vl_fixture() / "hf_processor.json");
}

// Exact integer checksums of the 8-bit levels behind each crop's normalised values (level =
// round((value * std + mean) / rescale), the inverse of the normalisation, exact to far below half
// a level), per channel: the plain sum and the sum of level * (index % 251), as the tool writes
// them. One pixel one level off changes both.
void expect_crop_checksums(const PixelCrops& crops, const nlohmann::json& want,
                           const VisionConfig& vc, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(crops.crops), want.size()) << what;
  const size_t plane = static_cast<size_t>(crops.side * crops.side);
  for (size_t c = 0; c < want.size(); ++c)
    for (size_t ch = 0; ch < 3; ++ch) {
      const float* p = &crops.values[(c * 3 + ch) * plane];
      int64_t plain = 0, mixed = 0;
      for (size_t i = 0; i < plane; ++i) {
        const auto level = static_cast<int64_t>(
            std::lround((double(p[i]) * vc.image_std[ch] + vc.image_mean[ch]) / vc.rescale_factor));
        plain += level;
        mixed += level * static_cast<int64_t>(i % 251);
      }
      EXPECT_EQ(plain, want[c][ch][0].get<int64_t>()) << what << " crop " << c << " channel " << ch;
      EXPECT_EQ(mixed, want[c][ch][1].get<int64_t>()) << what << " crop " << c << " channel " << ch;
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
    expect_crop_checksums(crops, info["torchvision"]["checksums"], vision_->config, name);
  }
}

TEST_F(HfProcessor, VideoFramesMatchTheVideoProcessor) {
  const auto& v = hf_["video"];
  const auto path = test::sdar_vl_fixture() / v["file"].get<std::string>();
  if (!video_decoding_available()) {
    EXPECT_TRUE(test::refuses_video([&] { read_video_file(path, v["frames"]); }, path.string()));
    return;
  }
  const DecodedVideo video = read_video_file(path, v["frames"].get<int64_t>());
  EXPECT_EQ(video.indices, v["indices"].get<std::vector<int64_t>>());
  expect_crop_checksums(preprocess_frames(video.frames, vision_->config),
                        v["torchvision"]["checksums"], vision_->config, "video");
  EXPECT_EQ(video_token_count(static_cast<int64_t>(video.frames.size()), vision_->config),
            v["tokens"].get<int64_t>());
}

}  // namespace
}  // namespace dllm
