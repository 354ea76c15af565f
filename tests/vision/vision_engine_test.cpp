// Vision requests through the public Engine API (include/dllm/engine.h): the files decoded and
// encoded at submit, the placeholders expanded, the features carried by every forward of the
// sequence; greedy block decoding then reproduces the reference's trajectory
// (tools/make_sdar_vl_fixture.py: greedy_block_decode).
#include <gtest/gtest.h>

#include <fstream>

#include "dllm/engine.h"
#include "support/video_refusal.h"
#include "vision_test_util.h"

namespace dllm {
namespace {

std::vector<int32_t> collapse_placeholders(const std::vector<int32_t>& expanded) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < expanded.size(); ++i)
    if (!(i > 0 && expanded[i] == expanded[i - 1] && (expanded[i] == 300 || expanded[i] == 301)))
      ids.push_back(expanded[i]);
  return ids;
}

Request case_request(const nlohmann::json& c, const nlohmann::json& ref) {
  const auto dir = test::sdar_vl_fixture();
  Request r;
  r.prompt_ids = collapse_placeholders(c["ids"].get<std::vector<int32_t>>());
  for (const auto& name : c["images"])
    r.image_files.push_back(
        (dir / ref["images"][name.get<std::string>()]["file"].get<std::string>()).string());
  if (c["video"].get<bool>()) {
    r.video_files.push_back((dir / "video.mkv").string());
    r.video_frames = ref["video"]["sampled"];
  }
  r.max_tokens = static_cast<int32_t>(c["greedy_tokens"].size());
  r.ignore_eos = true;
  r.options = {{"remasking", "low_confidence_static"}};
  return r;
}

TEST(VisionEngine, GreedyBlockDecodingFollowsTheReference) {
  Engine engine({.model = test::sdar_vl_fixture().string(), .device = "cpu"});
  const auto ref = test::sdar_vl_reference();
  for (const auto& c : ref["cases"]) {
    if (c["video"].get<bool>() && !video_decoding_available()) {  // the image cases still run
      const Request r = case_request(c, ref);
      EXPECT_TRUE(test::refuses_video([&] { engine.generate(r); }, r.video_files[0])) << c["name"];
      continue;
    }
    const RequestResult out = engine.generate(case_request(c, ref));
    ASSERT_EQ(out.finish_reason, "length") << c["name"] << " " << out.error;
    EXPECT_EQ(out.prompt_ids, c["ids"].get<std::vector<int32_t>>()) << c["name"];
    EXPECT_EQ(out.stats.prompt_tokens, static_cast<int64_t>(c["ids"].size()));
    EXPECT_EQ(out.token_ids, c["greedy_tokens"].get<std::vector<int32_t>>()) << c["name"];

    // The same expanded ids without the features decode differently (the fixture's quiet mask
    // embedding makes the masks follow the prompt): the trajectory rests on the splice.
    Request plain = case_request(c, ref);
    plain.prompt_ids = c["ids"].get<std::vector<int32_t>>();
    plain.image_files.clear();
    plain.video_files.clear();
    EXPECT_NE(engine.generate(plain).token_ids, out.token_ids) << c["name"];
  }
}

TEST(VisionEngine, RequestsWithDifferentImagesDoNotShareThePrefixCache) {
  // Same placeholder ids, different pictures: the second must not reuse the first's K/V.
  Engine engine({.model = test::sdar_vl_fixture().string(), .device = "cpu"});
  const auto ref = test::sdar_vl_reference();
  const auto& c = ref["cases"][2];  // alpha image + video
  Request a = case_request(c, ref);
  if (!video_decoding_available()) {
    EXPECT_TRUE(test::refuses_video([&] { engine.generate(a); }, a.video_files[0]));
    return;
  }
  const RequestResult first = engine.generate(a);
  Request b = a;
  b.image_files = {(test::sdar_vl_fixture() / "images/gray.png").string()};
  const RequestResult other = engine.generate(b);
  EXPECT_EQ(other.stats.prefix_cached_tokens, 0);
  const RequestResult again = engine.generate(a);
  EXPECT_EQ(again.token_ids, first.token_ids);
  EXPECT_EQ(again.stats.prefix_cached_tokens, 0);
}

TEST(VisionEngine, ImagesInMemoryDecodeAsTheirFiles) {
  // Request::image_bytes (a server's data: URLs) against image_files: the same tokens.
  Engine engine({.model = test::sdar_vl_fixture().string(), .device = "cpu"});
  const auto ref = test::sdar_vl_reference();
  const auto& c = ref["cases"][0];  // the wide image
  Request r = case_request(c, ref);
  ASSERT_EQ(r.image_files.size(), 1u);
  std::ifstream f(r.image_files[0], std::ios::binary);
  r.image_bytes = {{std::string(std::istreambuf_iterator<char>(f), {}), "picture one"}};
  r.image_files.clear();
  const RequestResult out = engine.generate(r);
  ASSERT_EQ(out.finish_reason, "length") << out.error;
  EXPECT_EQ(out.token_ids, c["greedy_tokens"].get<std::vector<int32_t>>());
  // Files and bytes in one request are ambiguous (which comes first?): refused.
  r.image_files = {(test::sdar_vl_fixture() / "images/gray.png").string()};
  EXPECT_THROW(engine.submit(r), Error);
  // A bad image is named by its name, or by its index without one.
  r.image_files.clear();
  r.image_bytes = {{"not an image", "picture one"}};
  try {
    engine.submit(r);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("picture one: not a JPEG, PNG or WebP image", 0), 0u)
        << e.what();
  }
  r.image_bytes[0].name.clear();
  try {
    engine.submit(r);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("image_bytes[0]: ", 0), 0u) << e.what();
  }
}

TEST(VisionEngine, BadVisionRequestsAreRejectedAtSubmit) {
  Engine engine({.model = test::sdar_vl_fixture().string(), .device = "cpu"});
  Request r;
  r.prompt_ids = {1, 2, 300, 3};
  r.image_files = {"/nonexistent/picture.png"};
  EXPECT_THROW(engine.submit(r), Error);
  r.image_files = {(test::sdar_vl_fixture() / "images/gray.png").string(),
                   (test::sdar_vl_fixture() / "images/alpha.png").string()};
  EXPECT_THROW(engine.submit(r), Error);  // two images, one placeholder
  r.image_files = {(test::sdar_vl_fixture() / "images/gray.png").string()};
  r.video_files = {(test::sdar_vl_fixture() / "video.mkv").string()};
  EXPECT_THROW(engine.submit(r), Error);  // no video placeholder
  Engine text_only({.model = test::model_fixture("sdar-tiny").string(), .device = "cpu"});
  Request t;
  t.prompt_ids = {1, 2, 3};
  t.image_files = {(test::sdar_vl_fixture() / "images/gray.png").string()};
  EXPECT_THROW(text_only.submit(t), Error);
}

}  // namespace
}  // namespace dllm
