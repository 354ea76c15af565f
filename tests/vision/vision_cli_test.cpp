// `dllm info` and `dllm generate --image / --video` on the SDAR-VL fixture.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/video_refusal.h"
#include "vision_test_util.h"

namespace dllm {
namespace {

std::string dllm(const std::string& args) {
  return test::dllm_binary() + " " + args + " 2>&1";
}

TEST(VisionCli, InfoShowsTheVisionTower) {
  const auto r = test::run_command(dllm("info " + test::sdar_vl_fixture().string()));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("family           sdar — SDAR-VL"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model_type sdar_v"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("vision tower     SigLIP: 2 of 2 layers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("729 features per crop"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("196 features per frame"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("post_layernorm"), std::string::npos) << r.output;  // unused, listed
}

TEST(VisionCli, GenerateWithAnImageAndAVideoFollowsTheReference) {
  const auto ref = test::sdar_vl_reference();
  const auto& c = ref["cases"][2];  // alpha image + video
  std::string ids;
  const auto expanded = c["ids"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < expanded.size(); ++i)
    if (!(i > 0 && expanded[i] == expanded[i - 1] && (expanded[i] == 300 || expanded[i] == 301)))
      ids += (ids.empty() ? "" : ",") + std::to_string(expanded[i]);
  const auto dir = test::sdar_vl_fixture();
  const auto r = test::run_command(
      dllm("generate -m " + dir.string() + " --device cpu --prompt-ids " + ids + " --image " +
           (dir / "images/alpha.png").string() + " --video " + (dir / "video.mkv").string() +
           " --frames 4 --max-tokens " + std::to_string(c["greedy_tokens"].size()) +
           " --remasking low_confidence_static --format json"));
  if (!video_decoding_available()) {
    EXPECT_TRUE(test::refuses_video(r, (dir / "video.mkv").string()));
    return;
  }
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["ids"], c["greedy_tokens"]) << r.output;
  EXPECT_EQ(j["stats"]["prompt_tokens"], expanded.size()) << r.output;
}

TEST(VisionCli, BadImageFileIsAClearError) {
  const auto dir = test::sdar_vl_fixture();
  const auto r = test::run_command(dllm("generate -m " + dir.string() +
                                        " --device cpu --prompt-ids 1,300,2 --image " +
                                        (dir / "config.json").string()));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("config.json: not a JPEG, PNG or WebP image"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace dllm

namespace dllm {
namespace {

// --requests lines carry image_files / video_files / video_frames; a bad file fails its line only.
TEST(VisionCli, RequestsFileTakesImagesPerLine) {
  const auto ref = test::sdar_vl_reference();
  const auto& c = ref["cases"][0];  // the wide image
  std::vector<int32_t> ids;
  const auto expanded = c["ids"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < expanded.size(); ++i)
    if (!(i > 0 && expanded[i] == expanded[i - 1] && expanded[i] == 300))
      ids.push_back(expanded[i]);
  const auto dir = test::sdar_vl_fixture();
  const auto tmp = test::temp_dir("vision-requests");
  {
    std::ofstream f(tmp / "requests.jsonl");
    nlohmann::json good = {{"prompt_ids", ids},
                           {"image_files", {(dir / "images/wide.png").string()}},
                           {"max_tokens", c["greedy_tokens"].size()},
                           {"ignore_eos", true},
                           {"remasking", "low_confidence_static"}};
    nlohmann::json bad = good;
    bad["image_files"] = {(tmp / "missing.png").string()};
    f << good.dump() << "\n" << bad.dump() << "\n";
  }
  const auto r =
      test::run_command(dllm("generate -m " + dir.string() + " --device cpu --requests " +
                             (tmp / "requests.jsonl").string()));
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u) << r.output;
  EXPECT_EQ(lines[0]["ids"], c["greedy_tokens"]) << r.output;
  EXPECT_NE(lines[1]["error"].get<std::string>().find("missing.png"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace dllm
