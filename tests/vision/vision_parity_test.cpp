// SigLIP + projector + feature packing on the CPU, and the SDAR forward over prompts whose
// placeholders carry those features, against the independent PyTorch reference
// (tools/reference_sdar_vl.py via tools/make_sdar_vl_fixture.py): ≤ 1e-4 relative error.
#include <gtest/gtest.h>

#include <numeric>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/npy.h"
#include "support/video_refusal.h"
#include "vision/feature_packing.h"
#include "vision/image_decode.h"
#include "vision/video_decode.h"
#include "vision/vision_prompt.h"
#include "vision_test_util.h"

namespace dllm {
namespace {

class VisionParity : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(test::sdar_vl_fixture());
    vision_ = VisionModel::load(*model_);
    encoder_ = make_cpu_vision_encoder(*vision_);
    ref_ = test::sdar_vl_reference();
    const TensorEntry& nl = *vision_->tensors.image_newline;
    newline_.resize(static_cast<size_t>(nl.numel()));
    convert_to_f32(*nl.dtype, nl.data, newline_.data(), newline_.size());
  }
  RgbImage image(const std::string& name) {
    return read_image_file(test::sdar_vl_fixture() /
                           ref_["images"][name]["file"].get<std::string>());
  }
  std::vector<float> image_features(const std::string& name) {
    const RgbImage img = image(name);
    return pack_image_features(encoder_->encode(preprocess_image(img, vision_->config)),
                               {img.height, img.width}, newline_, vision_->config);
  }
  std::filesystem::path video_file() {
    return test::sdar_vl_fixture() / ref_["video"]["file"].get<std::string>();
  }
  std::vector<RgbImage> video_frames() {
    return read_video_file(video_file(), ref_["video"]["sampled"]).frames;
  }
  // Rows `rows` of a [n, D] matrix.
  static std::vector<float> pick(const std::vector<float>& m, const std::vector<int64_t>& rows,
                                 int64_t D) {
    std::vector<float> out;
    for (int64_t r : rows) out.insert(out.end(), m.begin() + r * D, m.begin() + (r + 1) * D);
    return out;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<VisionModel> vision_;
  std::unique_ptr<VisionEncoder> encoder_;
  nlohmann::json ref_;
  std::vector<float> newline_;
};

TEST_F(VisionParity, ImageFeaturesMatchTheReference) {
  const int64_t D = vision_->config.text_hidden_size;
  for (const char* name : {"wide", "tall", "square", "alpha", "gray", "large"}) {
    const auto& info = ref_["images"][name];
    const std::vector<float> feats = image_features(name);
    ASSERT_EQ(static_cast<int64_t>(feats.size()), info["tokens"].get<int64_t>() * D) << name;
    const NpyArray want =
        read_npy(test::sdar_vl_fixture() / (std::string("features_") + name + ".npy"));
    const auto rows = info["rows"].get<std::vector<int64_t>>();
    ASSERT_EQ(want.shape, (std::vector<int64_t>{int64_t(rows.size()), D}));
    EXPECT_LE(test::rel_error(pick(feats, rows, D), want.f32), 1e-4) << name;
  }
}

// Several images at once (the next preprocessed while one encodes): each image's own rows.
TEST_F(VisionParity, ImagesEncodedTogetherGiveEachImagesRows) {
  const std::vector<std::string> names = {"wide", "tall", "square"};
  std::vector<RgbImage> images;
  for (const std::string& name : names) images.push_back(image(name));
  const std::vector<std::vector<float>> rows = encode_images(*encoder_, images, newline_);
  ASSERT_EQ(rows.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i)
    EXPECT_EQ(rows[i], image_features(names[i])) << names[i];
}

TEST_F(VisionParity, VideoFeaturesMatchTheReference) {
  const int64_t D = vision_->config.text_hidden_size;
  if (!video_decoding_available()) {
    EXPECT_TRUE(test::refuses_video([&] { video_frames(); }, video_file().string()));
    return;
  }
  const auto frames = video_frames();
  const auto n = static_cast<int64_t>(frames.size());
  const std::vector<float> feats = pack_video_features(
      encoder_->encode(preprocess_frames(frames, vision_->config)), n, newline_, vision_->config);
  ASSERT_EQ(static_cast<int64_t>(feats.size()), ref_["video"]["tokens"].get<int64_t>() * D);
  EXPECT_EQ(video_token_count(n, vision_->config), 4 * 196 + 1);
  const NpyArray want = read_npy(test::sdar_vl_fixture() / "features_video.npy");
  const auto rows = ref_["video"]["rows"].get<std::vector<int64_t>>();
  EXPECT_LE(test::rel_error(pick(feats, rows, D), want.f32), 1e-4);
}

// The whole path: placeholders expanded, features spliced into the prompt's embeddings, the
// SDAR forward under the block-causal prefill mask.
TEST_F(VisionParity, PromptLogitsMatchTheReference) {
  auto backend = make_cpu_backend(*model_);
  const int32_t image_id = 300, video_id = 301;
  for (const auto& c : ref_["cases"]) {
    if (c["video"].get<bool>() && !video_decoding_available()) {  // the image cases still run
      EXPECT_TRUE(test::refuses_video([&] { video_frames(); }, video_file().string())) << c["name"];
      continue;
    }
    const auto expanded = c["ids"].get<std::vector<int32_t>>();
    // Collapse each run of placeholders to the one token a chat template writes.
    std::vector<int32_t> ids;
    for (size_t i = 0; i < expanded.size(); ++i)
      if (!(i > 0 && expanded[i] == expanded[i - 1] &&
            (expanded[i] == image_id || expanded[i] == video_id)))
        ids.push_back(expanded[i]);
    VisionItems items;
    for (const auto& name : c["images"]) items.images.push_back(image(name));
    if (c["video"].get<bool>()) items.videos.push_back(video_frames());
    const VisionPrompt vp = build_vision_prompt(ids, items, *vision_, *encoder_);
    ASSERT_EQ(vp.prompt.ids, expanded) << c["name"];
    for (size_t i = 0; i < expanded.size(); ++i)
      ASSERT_EQ(vp.prompt.modality[i], expanded[i] == image_id   ? Modality::kImage
                                       : expanded[i] == video_id ? Modality::kVideo
                                                                 : Modality::kText);

    SequenceForward f;
    f.tokens = vp.prompt.ids;
    f.positions.resize(f.tokens.size());
    std::iota(f.positions.begin(), f.positions.end(), 0);
    f.rule = AttentionRule::block_causal(4);
    f.input_embeddings = vp.embeddings;
    f.want_logits = true;
    for (int64_t r : c["rows"].get<std::vector<int64_t>>()) f.output_rows.push_back(int32_t(r));
    const auto logits = backend->forward(std::span(&f, 1))[0].logits;
    const NpyArray want = read_npy(test::sdar_vl_fixture() / c["logits"].get<std::string>());
    EXPECT_LE(test::rel_error(logits, want.f32), 1e-4) << c["name"];

    // Without the features (placeholder token embeddings) the logits are far off: the splice
    // is what the parity rests on.
    f.input_embeddings.reset();
    const auto plain = backend->forward(std::span(&f, 1))[0].logits;
    EXPECT_GT(test::rel_error(plain, want.f32), 1e-2) << c["name"];
  }
}

TEST_F(VisionParity, PlaceholderCountsMustMatchTheItems) {
  VisionItems items;
  items.images.push_back(image("gray"));
  const std::vector<int32_t> none = {1, 2, 3}, two = {1, 300, 300, 4};
  EXPECT_THROW(build_vision_prompt(none, items, *vision_, *encoder_), Error);
  EXPECT_THROW(build_vision_prompt(two, items, *vision_, *encoder_), Error);
  const std::vector<int32_t> video = {1, 301};
  EXPECT_THROW(build_vision_prompt(video, items, *vision_, *encoder_), Error);
}

}  // namespace
}  // namespace dllm
