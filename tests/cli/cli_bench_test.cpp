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
  const auto r = test::run_command(test::dllm_binary() + " bench --device cpu --threads 1 --shape " +
                                   shape("sdar-tiny") + " --block 4 --context 8 --reps 2 " +
                                   "--prefill 0 --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_json_file(out)["rows"].size(), 1u);
}

}  // namespace
}  // namespace dllm
