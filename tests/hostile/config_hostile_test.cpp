// Hostile config.json values (issue 19): values that would wrap, negative or absurd sizes,
// products past the weight limit, a missing context length (default cap), non-regular files,
// and errors that name config.json, the key, the value and the accepted range.
#include <gtest/gtest.h>

#include "hostile/hostile_test_util.h"
#include "io/json_file.h"
#include "model/model.h"
#include "model/random_model.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using hostile::contains;
using hostile::error_of;
namespace fs = std::filesystem;

nlohmann::json fixture_config(const std::string& name) {
  return read_json_file(test::model_fixture(name) / "config.json");
}

// The error parsing `config` (sdar-tiny's config with one edit) raises.
std::string config_error(const std::function<void(nlohmann::json&)>& edit,
                         const std::string& fixture = "sdar-tiny") {
  nlohmann::json config = fixture_config(fixture);
  edit(config);
  return error_of([&] {
    const Family& family = find_family(config, "m/config.json");
    family.parse_config(config, "m/config.json").validate("m/config.json");
  });
}

TEST(HostileConfig, HugeUnsignedDoesNotWrap) {
  const std::string e = config_error([](auto& c) { c["hidden_size"] = UINT64_MAX; });
  EXPECT_TRUE(contains(e,
                       "m/config.json: field 'hidden_size' is 18446744073709551615, outside "
                       "the accepted range 1..65536"))
      << e;
}

TEST(HostileConfig, NegativeAndAbsurdSizesNameKeyAndRange) {
  EXPECT_TRUE(contains(config_error([](auto& c) { c["num_hidden_layers"] = -3; }),
                       "field 'num_hidden_layers' is -3, outside the accepted range 1..1024"));
  EXPECT_TRUE(contains(config_error([](auto& c) { c["num_attention_heads"] = 0; }),
                       "field 'num_attention_heads' is 0"));
  EXPECT_TRUE(contains(config_error([](auto& c) { c["vocab_size"] = int64_t{1} << 40; }),
                       "field 'vocab_size' is 1099511627776, outside the accepted range"));
  EXPECT_TRUE(
      contains(config_error([](auto& c) { c["max_position_embeddings"] = int64_t{1} << 40; }),
               "field 'max_position_embeddings'"));
  EXPECT_TRUE(
      contains(config_error([](auto& c) { c["block_size"] = 0; }), "field 'block_size' is 0"));
}

TEST(HostileConfig, ProductsPastTheWeightLimitAreRefused) {
  // Each value is in range; together they describe 2^31 x 65536 x 2 embedding elements.
  const std::string e = config_error([](auto& c) {
    c["vocab_size"] = INT32_MAX;
    c["hidden_size"] = 65536;
    c["head_dim"] = 64;
    c["num_attention_heads"] = 1024;
    c["num_key_value_heads"] = 1024;
  });
  EXPECT_TRUE(contains(e, "exceed 1099511627776 elements, the accepted maximum")) << e;
}

TEST(HostileConfig, RealValuesOutsideTheirRange) {
  EXPECT_TRUE(contains(config_error([](auto& c) { c["rope_theta"] = -1.0; }),
                       "field 'rope_theta' is -1.0, outside the accepted range (0, 1e+12]"));
  EXPECT_TRUE(contains(config_error([](auto& c) { c["partial_rotary_factor"] = 1e300; }),
                       "field 'partial_rotary_factor'"));
  EXPECT_TRUE(contains(config_error([](auto& c) {
                         c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 0}};
                       }),
                       "(rope_parameters): field 'rope_theta' is 0"));
  EXPECT_TRUE(contains(config_error([](auto& c) {
                         c["rope_parameters"] = {{"rope_type", 7}};
                       }),
                       "field 'rope_type' must be a string"));
  // LLaDA derives intermediate_size = mlp_ratio x d_model: a huge ratio must not overflow.
  EXPECT_TRUE(contains(config_error(
                           [](auto& c) {
                             c.erase("mlp_hidden_size");
                             c["mlp_ratio"] = 1e30;
                           },
                           "llada-tiny"),
                       "field 'mlp_ratio' is 1e+30"));
}

TEST(HostileConfig, HugeTokenIdsDoNotWrap) {
  EXPECT_TRUE(contains(config_error([](auto& c) { c["eos_token_id"] = UINT64_MAX; }),
                       "field 'eos_token_id' must hold integer token ids in 0..2147483647"));
  EXPECT_TRUE(contains(config_error([](auto& c) { c["mask_token_id"] = 1 << 30; }),
                       "mask_token_id 1073741824 is outside the vocabulary"));
}

TEST(HostileConfig, MissingContextLengthGetsTheDocumentedCap) {
  nlohmann::json config = fixture_config("sdar-tiny");
  config.erase("max_position_embeddings");
  const ModelConfig c = kSdarFamily.parse_config(config, "m/config.json");
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_TRUE(c.context_limit_is_default);
  EXPECT_TRUE(contains(c.context_limit_description(), "default cap"));
  const ModelConfig given = kSdarFamily.parse_config(fixture_config("sdar-tiny"), "m");
  EXPECT_FALSE(given.context_limit_is_default);
}

TEST(HostileConfig, InfoPrintsTheDefaultContextCap) {
  const fs::path dir = test::temp_dir("nocontext");
  for (const auto& entry : fs::directory_iterator(test::model_fixture("sdar-tiny")))
    fs::create_symlink(entry.path(), dir / entry.path().filename());
  nlohmann::json config = fixture_config("sdar-tiny");
  config.erase("max_position_embeddings");
  fs::remove(dir / "config.json");
  hostile::write_text(dir / "config.json", config.dump());
  const auto r = test::run_command(test::dllm_binary() + " info " + dir.string());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "context          32768 positions (default cap")) << r.output;
  fs::remove_all(dir);
}

TEST(HostileConfig, NonRegularCheckpointFilesAreRefused) {
  const fs::path dir = test::temp_dir("fifo-ckpt");
  for (const auto& entry : fs::directory_iterator(test::model_fixture("sdar-tiny")))
    fs::create_symlink(entry.path(), dir / entry.path().filename());
  hostile::make_fifo(dir / "generation_config.json");
  EXPECT_TRUE(contains(error_of([&] { Model::load(dir); }),
                       "generation_config.json: not a regular file (it is a FIFO)"));
  fs::remove(dir / "generation_config.json");
  hostile::make_fifo(dir / "model-00002-of-00002.safetensors");
  EXPECT_TRUE(contains(error_of([&] { Model::load(dir); }),
                       "model-00002-of-00002.safetensors: not a regular file (it is a FIFO)"));
  hostile::make_fifo(dir / "config.json");
  EXPECT_TRUE(contains(error_of([&] { Model::load(dir); }), "config.json: not a regular file"));
  fs::remove_all(dir);
}

TEST(HostileConfig, DeeplyNestedConfigIsRefused) {
  const fs::path dir = test::temp_dir("deepcfg");
  hostile::write_text(dir / "config.json", "{\"model_type\": " + std::string(100000, '[') + "}");
  EXPECT_TRUE(contains(error_of([&] { Model::load(dir); }), "nested deeper than 64 levels"));
  fs::remove_all(dir);
}

TEST(HostileConfig, RandomModelTooLargeForMemoryIsRefusedUpFront) {
  nlohmann::json config = fixture_config("sdar-tiny");
  // 2^26 x 4096 x 2 embedding elements: under the 2^40 limit, 1 TiB of bf16.
  config["vocab_size"] = 1 << 26;
  config["hidden_size"] = 4096;
  const std::string e = error_of([&] { make_random_model(config, 1); });
  EXPECT_TRUE(contains(e, "GiB of memory")) << e;
}

}  // namespace
}  // namespace dllm
