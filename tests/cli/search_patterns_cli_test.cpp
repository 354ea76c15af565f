// `dllm search-patterns` as users run it: one calibration prompt through the sdar-tiny fixture,
// a config with a pattern for every (layer, query head) that `--sparse-prefill` and the config
// reader accept, and errors naming the option at fault.
#include <gtest/gtest.h>

#include "attention/sparse_prefill_config.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

std::string ids(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string((i * 37 + 11) % 300);
  return s;
}

TEST(CliSearchPatterns, WritesAConfigForEveryLayerAndHead) {
  const auto out = test::temp_dir("cli-search-patterns") / "patterns.json";
  const auto r = test::run_command(
      test::dllm_binary() + " search-patterns -m " + test::model_fixture("sdar-tiny").string() +
      " --ids " + ids(300) + " --vision 20,280 --frame-stride 13 -o " + out.string() + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const SparsePrefillConfig c = load_sparse_prefill_config(out);
  ASSERT_EQ(c.layers.size(), 2u);  // sdar-tiny: 2 layers, 4 query heads
  for (const auto& layer : c.layers) {
    EXPECT_TRUE(layer.given);
    ASSERT_EQ(layer.heads.size(), 4u);
  }
  EXPECT_NE(r.output.find("layer 1 head 3:"), std::string::npos) << r.output;
}

TEST(CliSearchPatterns, ErrorsNameTheOption) {
  const std::string base = test::dllm_binary() + " search-patterns -m " +
                           test::model_fixture("sdar-tiny").string() + " -o /tmp/x.json ";
  auto r = test::run_command(base + "--ids 1,2,3 --vision 2,9 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--vision must be BEGIN,END"), std::string::npos) << r.output;
  r = test::run_command(base + "--ids 1,2,3 --attention bidirectional 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--attention must be causal or block:N"), std::string::npos) << r.output;
  r = test::run_command(base + "2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--ids or as --ids-file"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dllm
