// `dllm info` and `dllm forward` as users run them: the binary, its exit status and its messages.
#include <gtest/gtest.h>

#include <cmath>

#include "io/json_file.h"
#include "io/npy.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

std::string join(const nlohmann::json& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + std::to_string(x.get<int>());
  return s;
}

TEST(CliForward, DumpsReferenceLogits) {
  const auto dir = test::model_fixture("wedlm-qwen25-tiny");
  const auto cases = read_json_file(dir / "cases.json")["cases"];
  const auto out = test::temp_dir("cli-forward") / "logits.npy";
  for (const auto& c : cases) {
    const auto r = test::run_command(
        test::dllm_binary() + " forward -m " + dir.string() + " --ids " + join(c["ids"]) +
        " --positions " + join(c["positions"]) + " --attention " +
        c["attention"].get<std::string>() + " --dump-logits " + out.string());
    ASSERT_EQ(r.status, 0) << r.output;
    const auto ours = read_npy(out), ref = read_npy(dir / c["logits"].get<std::string>());
    ASSERT_EQ(ours.shape, ref.shape);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.f32.size(); ++i) {
      num += std::pow(double(ours.f32[i]) - ref.f32[i], 2);
      den += std::pow(double(ref.f32[i]), 2);
    }
    EXPECT_LE(std::sqrt(num / den), 1e-4) << c["logits"];
  }
}

TEST(CliForward, PrefixDumpsOnlyQueryRowsEqualToFullForward) {
  const auto dir = test::model_fixture("sdar-tiny").string();
  const auto tmp = test::temp_dir("cli-prefix");
  const std::string ids = " --ids 5,17,42,7,9,11,13,250,290,290";
  auto full = test::run_command(test::dllm_binary() + " forward -m " + dir + ids +
                                " --dump-logits " + (tmp / "full.npy").string());
  ASSERT_EQ(full.status, 0) << full.output;
  auto pre = test::run_command(test::dllm_binary() + " forward -m " + dir + ids +
                               " --prefix 8 --dump-logits " + (tmp / "pre.npy").string());
  ASSERT_EQ(pre.status, 0) << pre.output;
  const auto a = read_npy(tmp / "full.npy"), b = read_npy(tmp / "pre.npy");
  ASSERT_EQ(b.shape, (std::vector<int64_t>{2, a.shape[1]}));
  for (size_t i = 0; i < b.f32.size(); ++i) EXPECT_NEAR(b.f32[i], a.f32[8 * a.shape[1] + i], 1e-4);
}

TEST(CliForward, InfoDescribesTheCheckpoint) {
  const auto r = test::run_command(test::dllm_binary() + " info " +
                                   test::model_fixture("fast-dllm-v2-tiny").string());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* needle :
       {"fast_dllm_v2", "Fast_dLLM_QwenForCausalLM", "block-causal, block 32", "right-shifted",
        "tied embeddings  yes", "BF16", "mask id          292"})
    EXPECT_NE(r.output.find(needle), std::string::npos) << needle << "\n" << r.output;
}

TEST(CliForward, InfoDescribesLlada2Moe) {
  const auto r = test::run_command(test::dllm_binary() + " info " +
                                   test::model_fixture("llada2-tiny").string());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* needle :
       {"llada2_moe", "LLaDA2MoeModelLM", "block-causal, block 32", "position-aligned",
        "rotary dims 8 of 16", "fused query_key_value",
        "16 routed (top 4, intermediate 16) + 1 shared, layers 1..2 (the first 1 dense)",
        "sigmoid + selection bias, 4 groups (top 2), scaling 2.5", "mask id          295"})
    EXPECT_NE(r.output.find(needle), std::string::npos) << needle << "\n" << r.output;
  EXPECT_EQ(r.output.find("unused tensors"), std::string::npos) << r.output;
}

TEST(CliForward, BadInputIsAClearErrorAndNonZeroExit) {
  const std::string bin = test::dllm_binary();
  const std::string m = " -m " + test::model_fixture("llada-tiny").string();
  const std::string out = " --dump-logits " + (test::temp_dir("cli-bad") / "x.npy").string();
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {" forward" + m + " --ids 1,2,300" + out,
       "token id 300 (index 2) is outside the vocabulary of size 300"},
      {" forward" + m + " --ids 1,2,-1" + out, "token id -1"},
      {" forward" + m + " --ids 1,2,3 --positions 0,1" + out,
       "--positions has 2 entries but --ids has 3"},
      {" forward" + m + " --ids 1,x" + out, "--ids: 'x' is not an integer"},
      {" forward" + m + " --ids 1,2 --attention diagonal" + out,
       "unknown attention rule 'diagonal'"},
      {" forward" + m + " --ids 1,2 --attention block:0" + out,
       "block size must be a positive integer"},
      {" forward" + m + " --ids 1,2 --prefix 2" + out,
       "--prefix 2 must leave at least one query token"},
      {" forward -m /nonexistent --ids 1" + out, "/nonexistent: not a model directory"},
      {" info " + test::fixtures_dir().string(), "no config.json"},
  };
  for (const auto& c : cases) {
    const auto r = test::run_command(bin + c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find("dllm: error:"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace dllm
