// `dllm generate` end to end: a tiny random SDAR checkpoint with the real Qwen3 tokenizer and chat
// template, raw and chat prompts, JSON output, stop strings, and bad input.
#include <gtest/gtest.h>

#include <fstream>

#include "support/random_checkpoint.h"
#include "support/test_paths.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace dllm {
namespace {

namespace fs = std::filesystem;

// One checkpoint for the whole suite (writing 10 MB of weights once).
class GenerateCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(test::temp_dir("generate-qwen3"));
    const nlohmann::json config = {{"architectures", {"SDARForCausalLM"}},
                                   {"model_type", "sdar"},
                                   {"vocab_size", 151936},
                                   {"hidden_size", 16},
                                   {"intermediate_size", 32},
                                   {"num_hidden_layers", 1},
                                   {"num_attention_heads", 2},
                                   {"num_key_value_heads", 1},
                                   {"head_dim", 8},
                                   {"rms_norm_eps", 1e-6},
                                   {"rope_theta", 1000000.0},
                                   {"tie_word_embeddings", false},
                                   {"max_position_embeddings", 4096},
                                   {"bos_token_id", 151643},
                                   {"eos_token_id", 151643},
                                   {"mask_token_id", 151669},
                                   {"block_size", 4}};
    test::write_random_checkpoint(*dir_, config, 5);
    const auto tok = test::fixtures_dir() / "tokenizers" / "qwen3";
    fs::copy_file(tok / "tokenizer.json", *dir_ / "tokenizer.json");
    fs::copy_file(tok / "tokenizer_config.json", *dir_ / "tokenizer_config.json");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static nlohmann::json run_json(const std::string& args) {
    const auto r = test::run_command("{ " + test::dllm_binary() + " generate -m " + dir_->string() +
                                     " --format json " + args + " 2>/dev/null; }");
    EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
    return nlohmann::json::parse(r.output);
  }
  static fs::path* dir_;
};
fs::path* GenerateCli::dir_ = nullptr;

TEST_F(GenerateCli, ChatPromptEndToEnd) {
  const auto j = run_json("--chat -p 'What is 2+3?' --system 'Be brief.' --max-tokens 10 --seed 3");
  const auto tok = Tokenizer::load(*dir_);
  const auto tmpl = ChatTemplate::load(*dir_);
  const std::string prompt =
      tmpl.render(nlohmann::json::array({{{"role", "system"}, {"content", "Be brief."}},
                                         {{"role", "user"}, {"content", "What is 2+3?"}}}),
                  true);
  EXPECT_EQ(j["stats"]["prompt_tokens"], tok.encode(prompt).size());
  const auto ids = j["ids"].get<std::vector<int32_t>>();
  EXPECT_LE(ids.size(), 10u);
  std::vector<int32_t> known;
  for (int32_t id : ids)
    if (tok.has_token(id)) known.push_back(id);
  EXPECT_EQ(j["text"], tok.decode(known, /*skip_special_tokens=*/true));
  EXPECT_TRUE(j["finish_reason"] == "length" || j["finish_reason"] == "stop");
  EXPECT_GT(j["stats"]["forwards"].get<int>(), 0);
}

TEST_F(GenerateCli, StopStringCutsTextAndStreamsTheSame) {
  const std::string args = "-p 'Once upon a time' --strategy ar --max-tokens 24";
  const auto full = run_json(args);
  const std::string text = full["text"];
  ASSERT_GE(text.size(), 8u) << "random model produced too little text to pick a stop string";
  // Three characters from the middle, on UTF-8 character boundaries.
  auto boundary = [&](size_t i) {
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
    return i;
  };
  const size_t from = boundary(text.size() / 2);
  size_t to = from;
  for (int c = 0; c < 3 && to < text.size(); ++c) to = boundary(to + 1);
  const std::string stop = text.substr(from, to - from);
  ASSERT_FALSE(stop.empty());
  const std::string quoted = "'" + stop + "'";
  if (stop.find('\'') != std::string::npos) GTEST_SKIP() << "stop string needs shell quoting";
  const auto cut = run_json(args + " --stop " + quoted);
  const std::string expect = text.substr(0, text.find(stop));
  EXPECT_EQ(cut["text"], expect);
  EXPECT_EQ(cut["finish_reason"], "stop");
  // Streaming text mode prints the same text.
  const auto streamed =
      test::run_command("{ " + test::dllm_binary() + " generate -m " + dir_->string() + " " + args +
                        " --stop " + quoted + " 2>/dev/null; }");
  EXPECT_EQ(streamed.output, expect + "\n");
}

TEST_F(GenerateCli, BadInputIsAClearError) {
  const std::string bin = test::dllm_binary() + " generate -m " + dir_->string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "give a prompt"},
      {" -p ''", "give a prompt"},
      {" -p hi --max-tokens 0", "--max-tokens must be positive"},
      {" -p hi --max-tokens 5000", "exceeds the model's context of 4096"},
      {" -p hi --steps 9", "--steps 9 exceeds the block length 4"},
      {" -p hi --threshold 1.5", "--threshold must be in [0, 1]"},
      {" -p hi --strategy full", "'full' is not available for sdar"},
      {" -p hi --temperature -1", "--temperature must be >= 0"},
      {" -p hi --top-p 0", "--top-p must be in (0, 1]"},
      {" --system x -p hi", "--system needs --chat"},
      {" --prompt-ids 1,999999", "outside the vocabulary"},
      {" -p hi --format xml", "--format 'xml'"},
      {" -p hi --seed 18446744073709551616", "--seed must be a whole number in"},
      // Issue 19's crash and hang cases: non-finite or denormal temperatures (every confidence
      // NaN), S2D2 bin counts whose product overflowed int32.
      {" -p hi --temperature nan", "--temperature must be >= 0 (got nan)"},
      {" -p hi --temperature inf", "--temperature must be >= 0 (got inf)"},
      {" -p hi --temperature 1e-40", "--temperature must be 0 (greedy) or at least 1e-05"},
      {" -p hi --strategy s2d2 --verify-policy bandit --ucb-span-bins 65536 --ucb-progress-bins "
       "65536",
       "-bins must be in [1, 64]"},
      {" -p hi --seed 1.5", "--seed must be a whole number in"},
      {" -p hi --seed -9223372036854775809", "--seed must be a whole number in"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = test::run_command(bin + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  }
}

// WeDLM checkpoints decode with streaming parallel decoding by default and report its metrics.
TEST(GenerateCliWedlm, DefaultStrategyAndMetrics) {
  const std::string bin =
      test::dllm_binary() + " generate -m " + test::model_fixture("wedlm-qwen3-tiny").string();
  auto r = test::run_command("{ " + bin + " --prompt-ids 1,2,3 --format json 2>/dev/null; }");
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["strategy"], "wedlm");
  const auto& s = j["stats"];
  EXPECT_EQ(s["prompt_tokens"], 3);
  const double gen = s["generated_tokens"].get<double>();
  EXPECT_EQ(gen, static_cast<double>(j["ids"].size()));
  EXPECT_GT(gen, 0);
  ASSERT_TRUE(s.contains("p_cache")) << s.dump();
  ASSERT_TRUE(s["decode_forwards"].is_number_integer());
  ASSERT_TRUE(s["window_tokens"].is_number_integer());
  EXPECT_EQ(s["forwards"].get<int64_t>(), s["decode_forwards"].get<int64_t>() + 1)
      << "one prefill forward";
  EXPECT_NEAR(s["p_cache"].get<double>(), gen / s["window_tokens"].get<double>(), 1e-12);
  EXPECT_GT(s["p_cache"].get<double>(), 0.0);
  EXPECT_LE(s["p_cache"].get<double>(), 1.0);

  // Knobs change the run; the text mode stats line carries the metrics too.
  r = test::run_command(bin +
                        " --prompt-ids 1,2,3 --max-tokens 12 --window 4 --entropy-threshold "
                        "none --pos-penalty 0.1 --pad-window false");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[wedlm]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("p_cache 0."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("decode_forwards 13,"), std::string::npos)
      << "none: one token per step, 12 tokens need 13 decode forwards\n"
      << r.output;

  // The autoregressive baseline stays available and has no WeDLM metrics.
  r = test::run_command("{ " + bin +
                        " --prompt-ids 1,2,3 --max-tokens 4 --strategy ar "
                        "--format json 2>/dev/null; }");
  ASSERT_EQ(r.status, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["strategy"], "ar");
  EXPECT_FALSE(j["stats"].contains("p_cache"));

  const std::vector<std::pair<std::string, std::string>> bad = {
      {" --window 0", "--window must be positive"},
      {" --entropy-threshold abc", "--entropy-threshold must be a number >= 0 or 'none'"},
      {" --entropy-threshold -1", "--entropy-threshold must be >= 0 or 'none'"},
      {" --pos-penalty -0.5", "--pos-penalty must be a finite number >= 0"},
      {" --pad-window maybe", "--pad-window must be true or false"},
      {" --threshold 0.9", "see --entropy-threshold"},
      {" --strategy ar --window 4", "--window applies only to --strategy wedlm"},
      {" --strategy block", "not available for wedlm checkpoints (available: wedlm, ar)"},
  };
  for (const auto& [args, needle] : bad) {
    const auto e = test::run_command(bin + " --prompt-ids 1,2,3" + args);
    EXPECT_NE(e.status, 0) << args;
    EXPECT_NE(e.output.find(needle), std::string::npos) << args << "\n" << e.output;
  }
}

// Full diffusion on the tiny LLaDA and Dream fixtures (no tokenizer: ids in, ids out).
TEST(GenerateCliFullDiffusion, LladaAndDreamFixturesGenerate) {
  auto run = [](const std::string& model, const std::string& args) {
    const auto r =
        test::run_command("{ " + test::dllm_binary() + " generate -m " +
                          test::model_fixture(model).string() + " " + args + " 2>/dev/null; }");
    EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
    return nlohmann::json::parse(r.output);
  };
  // LLaDA defaults: 128 tokens, blocks of 32, one step per token.
  auto j = run("llada-tiny", "--prompt-ids 1,2,3 --format json");
  EXPECT_EQ(j["stats"]["forwards"], 128);
  EXPECT_EQ(j["stats"]["prompt_tokens"], 3);
  const auto ids = j["ids"].get<std::vector<int32_t>>();
  if (j["finish_reason"] == "length") {
    EXPECT_EQ(ids.size(), 128u);
  } else {
    EXPECT_EQ(j["finish_reason"], "stop");
    EXPECT_LT(ids.size(), 128u);
  }
  for (int32_t id : ids) {
    EXPECT_NE(id, 294) << "the mask token is never generated";
    EXPECT_NE(id, 250) << "eos (the stop id) is not part of the output";
  }
  j = run("llada-tiny",
          "--prompt-ids 1,2,3 --format json --max-tokens 16 --block-length 4 --steps 8 "
          "--temperature 0.8 --seed 4 --cfg-scale 0.5 --remasking random --logits-eos-inf "
          "--confidence-eos-eot-inf");
  EXPECT_EQ(j["stats"]["forwards"], 8);
  EXPECT_EQ(j["ids"].size(), 16u);
  // The same seed gives the same tokens.
  EXPECT_EQ(run("llada-tiny",
                "--prompt-ids 1,2,3 --format json --max-tokens 16 --block-length 4 --steps 8 "
                "--temperature 0.8 --seed 4 --cfg-scale 0.5 --remasking random --logits-eos-inf "
                "--confidence-eos-eot-inf")["ids"],
            j["ids"]);
  j = run("dream-tiny", "--prompt-ids 1,2,3 --format json --max-tokens 24");
  EXPECT_EQ(j["stats"]["forwards"], 24) << "steps default to max_tokens";
  EXPECT_LE(j["ids"].size(), 24u);
  j = run("dream-tiny",
          "--prompt-ids 1,2,3 --format json --max-tokens 16 --steps 4 --alg origin "
          "--temperature 1 --top-p 0.9 --top-k 20 --seed 2");
  EXPECT_EQ(j["stats"]["forwards"], 4);
  // Text mode without a tokenizer prints the ids.
  const auto text = test::run_command(test::dllm_binary() + " generate -m " +
                                      test::model_fixture("dream-tiny").string() +
                                      " --prompt-ids 5,6 --max-tokens 4 --alg topk_margin");
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("[full]"), std::string::npos) << text.output;
}

// The cached full-diffusion strategies from the command line (issue 9): d2Cache, Fast-dLLM v1,
// dLLM-Cache; each generates the whole canvas.
TEST(GenerateCliFullDiffusion, CachedStrategiesGenerate) {
  auto run = [](const std::string& model, const std::string& args) {
    const auto r =
        test::run_command("{ " + test::dllm_binary() + " generate -m " +
                          test::model_fixture(model).string() + " " + args + " 2>/dev/null; }");
    EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
    return nlohmann::json::parse(r.output);
  };
  for (const char* model : {"llada-tiny", "dream-tiny"}) {
    SCOPED_TRACE(model);
    auto j = run(model,
                 "--prompt-ids 1,2,3 --format json --max-tokens 16 --strategy d2cache --d2c-k 4 "
                 "--d2c-sigma 3 --d2c-p 0.2 --d2c-inflate 2");
    EXPECT_EQ(j["stats"]["forwards"], 16) << "one token per step";
    // Step 0 forwards the whole canvas (3 + 16 rows), later steps only the selected rows.
    EXPECT_GT(j["stats"]["query_rows"].get<int>(), 19);
    EXPECT_LT(j["stats"]["query_rows"].get<int>(), 16 * 19);
    j = run(model,
            "--prompt-ids 1,2,3 --format json --max-tokens 16 --strategy d2cache --d2c-frozen-conf "
            "--block-length 8 --threshold 0.01");
    EXPECT_LE(j["stats"]["forwards"].get<int>(), 16);
    for (const char* cache : {"dual", "prefix"}) {
      j = run(model, std::string("--prompt-ids 1,2,3 --format json --max-tokens 16 --strategy "
                                 "fastdllm --block-length 8 --cache ") +
                         cache);
      EXPECT_GE(j["stats"]["forwards"].get<int>(), 2);
      EXPECT_LT(j["stats"]["query_rows"].get<int>(), j["stats"]["forwards"].get<int>() * 19);
    }
    j = run(model,
            "--prompt-ids 1,2,3 --format json --max-tokens 16 --strategy dllmcache --dlc-kp 4 "
            "--dlc-kr 2 --dlc-rho 0.5");
    EXPECT_EQ(j["stats"]["forwards"], 16);
    EXPECT_EQ(j["stats"]["query_rows"], 16 * 19) << "dLLM-Cache forwards the whole canvas";
  }
}

TEST(GenerateCliFullDiffusion, BadInputIsAClearError) {
  const std::string llada =
      test::dllm_binary() + " generate -m " + test::model_fixture("llada-tiny").string();
  const std::string dream =
      test::dllm_binary() + " generate -m " + test::model_fixture("dream-tiny").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {llada + " --prompt-ids 1 --max-tokens 100",
       "--block-length 32 must divide --max-tokens 100"},
      {llada + " --prompt-ids 1 --max-tokens 64 --block-length 16 --steps 6",
       "--steps 6 must be a multiple of the number of blocks 4"},
      {llada + " --prompt-ids 1 --cfg-scale -1", "--cfg-scale must be >= 0"},
      {llada + " --prompt-ids 1 --remasking sequential", "--remasking 'sequential'"},
      {llada + " --prompt-ids 1 --top-p 0.9", "do not apply to LLaDA"},
      {llada + " --prompt-ids 1 --strategy block", "'block' is not available for llada"},
      {llada + " --prompt-ids 1,294", "contains the mask token id 294"},
      {dream + " --prompt-ids 1 --alg fastest", "--alg 'fastest'"},
      {dream + " --prompt-ids 1 --alg origin --alg-temp 1", "--alg-temp does not apply"},
      {dream + " --prompt-ids 1 --logits-eos-inf", "--logits-eos-inf applies to LLaDA"},
      {dream + " --prompt-ids 1 --steps -3", "--steps must be positive"},
      {llada + " --prompt-ids 1 --strategy d2cache --d2c-k 0", "--d2c-k must be positive"},
      {dream + " --prompt-ids 1 --strategy d2cache --d2c-p 2", "--d2c-p must be in [0, 1]"},
      {dream + " --prompt-ids 1 --d2c-sigma 3", "--d2c-* options apply to --strategy d2cache"},
      {llada + " --prompt-ids 1 --strategy fastdllm --cache both", "--cache 'both'"},
      {llada + " --prompt-ids 1 --cache dual", "--cache applies to --strategy fastdllm"},
      {dream + " --prompt-ids 1 --strategy dllmcache --dlc-rho -1", "--dlc-rho must be in [0, 1]"},
  };
  for (const auto& [cmd, needle] : cases) {
    const auto r = test::run_command(cmd);
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_NE(r.output.find(needle), std::string::npos) << cmd << "\n" << r.output;
  }
}

// The CPU GEMM kernel can be forced by name (comparisons); a name that is none is a clear error,
// and every kernel this CPU runs gives the same ids.
TEST(GenerateCliCpuGemm, KernelByNameSameIdsAndBadNames) {
  const std::string cmd = test::dllm_binary() + " generate --device cpu -m " +
                          test::model_fixture("llada-tiny").string() +
                          " --prompt-ids 1,2,3 --max-tokens 32 --format json";
  const auto bad = test::run_command("DLLM_CPU_GEMM_KERNEL=avx9 " + cmd);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("DLLM_CPU_GEMM_KERNEL=avx9 is not a kernel (accepted: portable"),
            std::string::npos)
      << bad.output;
  std::optional<nlohmann::json> first;
  for (const char* kernel : {"portable", "avx2", "avx512", "avx512-wide"}) {
    const auto r = test::run_command(std::string("DLLM_CPU_GEMM_KERNEL=") + kernel + " " + cmd);
    if (r.status != 0) {  // a kernel this CPU lacks: named as such
      EXPECT_NE(r.output.find("this CPU lacks the instructions"), std::string::npos) << r.output;
      continue;
    }
    const auto ids = nlohmann::json::parse(r.output).at("ids");
    EXPECT_EQ(ids.size(), 32u) << kernel;
    if (!first) first = ids;
    EXPECT_EQ(ids, *first) << kernel;
  }
}

}  // namespace
}  // namespace dllm
