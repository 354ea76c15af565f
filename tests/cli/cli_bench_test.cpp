// `dllm bench` as users run it, on the CPU with tiny fixture shapes: the step kinds and the
// whole-generation mode produce rows whose counts and shapes follow from the arguments.
#include <gtest/gtest.h>

#include "io/json_file.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

std::string shape(const char* fixture) {
  return (test::model_fixture(fixture) / "config.json").string();
}

TEST(CliBench, StepKindsOverBlockAndContextLists) {
  const auto out = test::temp_dir("cli-bench") / "steps.json";
  const auto r = test::run_command(test::dllm_binary() + " bench --device cpu --shape " +
                                   shape("sdar-tiny") + " --step verify --block 4,2 --context " +
                                   "8,16 --reps 2 --prefill 0 --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto rows = read_json_file(out)["rows"];
  ASSERT_EQ(rows.size(), 4u);  // blocks x contexts
  EXPECT_EQ(rows[0]["block"], 4);
  EXPECT_EQ(rows[3]["block"], 2);
  EXPECT_EQ(rows[3]["context"], 16);
  for (const auto& row : rows) EXPECT_GT(row["ms_per_step"].get<double>(), 0.0);
}

TEST(CliBench, DecodeModeRunsEveryStrategy) {
  const auto out = test::temp_dir("cli-bench") / "decode.json";
  const auto r =
      test::run_command(test::dllm_binary() + " bench --device cpu --shape " + shape("llada-tiny") +
                        " --decode full,d2cache,fastdllm --prompt-length 20 "
                        "--max-tokens 12 --json " +
                        out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto rows = read_json_file(out)["rows"];
  ASSERT_EQ(rows.size(), 3u);
  // Full diffusion recomputes the whole canvas every step; the cached strategies fewer rows.
  EXPECT_EQ(rows[0]["strategy"], "full");
  EXPECT_DOUBLE_EQ(rows[0]["canvas_fraction"].get<double>(), 1.0);
  EXPECT_EQ(rows[0]["forwards"], 12);  // one token per step (steps = max tokens)
  for (size_t i = 1; i < rows.size(); ++i)
    EXPECT_LT(rows[i]["canvas_fraction"].get<double>(), 1.0) << rows[i]["strategy"];
}

TEST(CliBench, BadArgumentsNameTheOption) {
  const auto r = test::run_command(test::dllm_binary() + " bench --device cpu --shape " +
                                   shape("llada-tiny") + " --decode full,,d2cache");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--decode"), std::string::npos) << r.output;
  const auto s = test::run_command(test::dllm_binary() + " bench --device cpu --shape " +
                                   shape("sdar-tiny") + " --step sideways");
  EXPECT_NE(s.status, 0);
  EXPECT_NE(s.output.find("--step"), std::string::npos) << s.output;
  const auto t = test::run_command(test::dllm_binary() + " bench --device cpu --shape " +
                                   shape("sdar-tiny") + " --threads 0");
  EXPECT_NE(t.status, 0);
  EXPECT_NE(t.output.find("--threads must be between 1 and 256 (got 0)"), std::string::npos)
      << t.output;
}

TEST(CliBench, ThreadsOptionRunsTheStep) {
  const auto out = test::temp_dir("cli-bench") / "threads.json";
  const auto r = test::run_command(
      test::dllm_binary() + " bench --device cpu --threads 1 --shape " + shape("sdar-tiny") +
      " --block 4 --context 8 --reps 2 " + "--prefill 0 --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_json_file(out)["rows"].size(), 1u);
}

// Batched long context (--sequences): every sequence over its own random context, sparse or
// exact, through one forward a step; tensor parallel through the same step.
TEST(CliBench, SequencesRunInOneStepSparseAndTensorParallel) {
  const auto dir = test::temp_dir("cli-bench");
  for (const char* extra : {"", " --sparse mage --sparse-k 8", " --tensor-parallel 2"}) {
    const auto out = dir / "sequences.json";
    const auto r =
        test::run_command(test::dllm_binary() + " bench --device cpu --shape " +
                          shape("sdar-tiny") + " --block 4 --context 32 --reps 2 " +
                          "--prefill 0 --sequences 3" + extra + " --json " + out.string());
    ASSERT_EQ(r.status, 0) << extra << r.output;
    const auto row = read_json_file(out)["rows"][0];
    EXPECT_EQ(row["sequences"], 3) << extra;
    EXPECT_GT(row["tokens_per_s"].get<double>(), 0.0) << extra;
  }
  const auto bad = test::run_command(test::dllm_binary() + " bench --device cpu --shape " +
                                     shape("sdar-tiny") + " --sequences 0");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--sequences must be in [1, 4096] (got 0)"), std::string::npos)
      << bad.output;
}

// The vision prompt end to end (--video): a directory of frame images (the fixture's test
// images, different sizes: every frame is resized to the crop) and the fixture video.
TEST(CliBench, VideoModeTimesEveryStageOfAVisionPrompt) {
  const auto dir = test::model_fixture("sdar-vl-tiny");
  const auto out = test::temp_dir("cli-bench") / "video.json";
  const auto r = test::run_command(test::dllm_binary() + " bench --device cpu --shape " +
                                   shape("sdar-vl-tiny") + " --video " + (dir / "images").string() +
                                   " --frames 3 --images 2 --reps 1 --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto row = read_json_file(out)["rows"][0];
  EXPECT_EQ(row["frames"], 3);
  EXPECT_EQ(row["prompt_tokens"], 64 + 3 * 196 + 1);  // text, 196 per frame, one newline
  for (const char* k : {"decode_ms", "preprocess_ms", "encode_ms", "prefill_ms", "end_to_end_ms",
                        "frames_per_s", "images_per_s"})
    EXPECT_GT(row[k].get<double>(), 0.0) << k;
  EXPECT_EQ(row["images"], 2);
  EXPECT_GE(row["image_crops"].get<int>(), 2);  // a base crop each, tiles by aspect
  // Asking for more frames than the directory holds takes every frame (the uniform sampler).
  const auto all = test::run_command(
      test::dllm_binary() + " bench --device cpu --shape " + shape("sdar-vl-tiny") + " --video " +
      (dir / "images").string() + " --frames 64 --reps 1 --json " + out.string());
  ASSERT_EQ(all.status, 0) << all.output;
  EXPECT_EQ(read_json_file(out)["rows"][0]["frames"], 6);
}

TEST(CliBench, VideoModeNeedsAVisionShapeAndValidFrames) {
  const auto dir = test::model_fixture("sdar-vl-tiny");
  const auto text = test::run_command(test::dllm_binary() + " bench --device cpu --shape " +
                                      shape("sdar-tiny") + " --video " + (dir / "images").string());
  EXPECT_NE(text.status, 0);
  EXPECT_NE(text.output.find("vision-language shape"), std::string::npos) << text.output;
  const auto frames = test::run_command(test::dllm_binary() + " bench --device cpu --shape " +
                                        shape("sdar-vl-tiny") + " --video " +
                                        (dir / "images").string() + " --frames 0");
  EXPECT_NE(frames.status, 0);
  EXPECT_NE(frames.output.find("--frames must be in 1..1024"), std::string::npos) << frames.output;
}

}  // namespace
}  // namespace dllm
