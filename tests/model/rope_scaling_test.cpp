// RoPE scaling (model/rope.h) against the independent NumPy reference
// tools/reference_rope_scaling.py (tests/fixtures/rope/cases.json): config.json's rope_scaling is
// read by the real config reader, the frequencies and the attention factor match, and the CPU's
// NeoX rotation with them matches the reference's rotated vectors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_ops.h"
#include "io/json_file.h"
#include "model/model.h"
#include "model/rope.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

namespace fs = std::filesystem;

// The sdar-tiny fixture with the case's RoPE fields, loaded through Model::load.
ModelConfig load_with(const nlohmann::json& c) {
  const fs::path dir = test::temp_dir("rope-" + c["name"].get<std::string>());
  fs::copy(test::model_fixture("sdar-tiny"), dir,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  auto j = read_json_file(dir / "config.json");
  j["rope_theta"] = c["rope_theta"];
  j["head_dim"] = c["head_dim"];
  j["max_position_embeddings"] = c["max_position_embeddings"];
  if (c.contains("partial_rotary_factor")) j["partial_rotary_factor"] = c["partial_rotary_factor"];
  j["rope_scaling"] = c["rope_scaling"];
  std::ofstream(dir / "config.json") << j.dump(2);
  return Model::load(dir)->config();
}

TEST(RopeScaling, TablesAndRotationMatchReference) {
  const auto fx = read_json_file(test::fixtures_dir() / "rope" / "cases.json");
  ASSERT_GE(fx["cases"].size(), 6u);
  for (const auto& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const ModelConfig cfg = load_with(c);
    ASSERT_EQ(cfg.rotary_dim, c["rotary_dim"].get<int64_t>());
    const RopeTable t = rope_table(cfg);
    const auto want = c["inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(t.inv_freq.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(t.inv_freq[i], want[i], 2e-6 * want[i]) << "frequency " << i;
    EXPECT_NEAR(t.attention_factor, c["attention_factor"].get<double>(), 1e-6);
    const auto x = c["x"].get<std::vector<float>>();
    const auto positions = c["positions"].get<std::vector<int32_t>>();
    for (size_t p = 0; p < positions.size(); ++p) {
      std::vector<float> v = x;
      cpu::rope_neox(v.data(), static_cast<int64_t>(v.size()), 1, 1, static_cast<int64_t>(v.size()),
                     cfg.rotary_dim, std::span(&positions[p], 1), t.inv_freq, t.attention_factor);
      const auto r = c["rotated"][p].get<std::vector<double>>();
      for (size_t i = 0; i < r.size(); ++i)
        EXPECT_NEAR(v[i], r[i], 2e-3) << "position " << positions[p] << " dim " << i;
    }
  }
}

TEST(RopeScaling, DefaultTableIsTheUnscaledOne) {
  ModelConfig c;
  c.rope_theta = 1e6;
  c.rotary_dim = 64;
  const RopeTable t = rope_table(c);
  EXPECT_EQ(t.inv_freq, cpu::rope_inv_freq(1e6, 64));  // bit for bit: no checkpoint changes
  EXPECT_EQ(t.attention_factor, 1.0f);
}

}  // namespace
}  // namespace dllm
