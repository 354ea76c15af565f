// Broken numerics (issue 19): a checkpoint whose weights make the logits NaN stops every request
// with a named error, for every strategy, instead of emitting garbage ("!!!!") or never ending.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hostile/hostile_test_util.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

namespace fs = std::filesystem;

// A copy of an embedded model whose final norm weight is all NaN (bf16 0x7fc0): every logit NaN.
fs::path nan_model(const std::string& model, const std::string& final_norm) {
  const fs::path dir = test::temp_dir("nan-" + model);
  const fs::path source = test::models_dir() / model;
  for (const auto& entry : fs::directory_iterator(source))
    if (entry.path().filename() != "model.safetensors")
      fs::create_symlink(entry.path(), dir / entry.path().filename());
  std::ifstream in(source / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_len));
  const auto& tensor = header.at(final_norm);
  EXPECT_EQ(tensor.at("dtype"), "BF16");
  const size_t begin = 8 + header_len + tensor.at("data_offsets")[0].get<size_t>();
  const size_t end = 8 + header_len + tensor.at("data_offsets")[1].get<size_t>();
  for (size_t i = begin; i < end; i += 2) {
    bytes[i] = static_cast<char>(0xc0);
    bytes[i + 1] = 0x7f;
  }
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  return dir;
}

void expect_named_error(const fs::path& dir, const std::string& strategy) {
  const auto r = test::run_command("timeout 120 " + test::dllm_binary() + " generate -m " +
                                   dir.string() + " --prompt-ids 5,6,7 --max-tokens 16" +
                                   (strategy.empty() ? "" : " --strategy " + strategy));
  EXPECT_EQ(r.status, 1) << strategy << ": " << r.output;
  EXPECT_TRUE(hostile::contains(r.output, "non-finite logits")) << strategy << ": " << r.output;
  EXPECT_FALSE(hostile::contains(r.output, "internal error")) << r.output;
}

TEST(HostileNumerics, NanLogitsStopEveryBlockStrategyWithANamedError) {
  const fs::path dir = nan_model("tiny-block", "model.norm.weight");
  for (const std::string strategy : {"block", "ar", "s2d2"}) expect_named_error(dir, strategy);
  fs::remove_all(dir);
}

TEST(HostileNumerics, NanLogitsStopEveryFullDiffusionStrategyWithANamedError) {
  const fs::path dir = nan_model("tiny-full", "model.transformer.ln_f.weight");
  for (const std::string strategy : {"full", "fastdllm", "dllmcache", "d2cache"})
    expect_named_error(dir, strategy);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dllm
