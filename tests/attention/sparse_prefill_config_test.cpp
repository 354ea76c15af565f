// The sparse prefill config (attention/sparse_prefill_config.h): both published formats
// (MInference 1.0's layer list, MMInference's "layer-N" object), defaults for missing heads and
// layers, a save / load round trip, and errors that name the layer, head and field at fault.
#include <gtest/gtest.h>

#include "attention/sparse_prefill_config.h"
#include "core/error.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

SparsePrefillConfig parse(const char* text) {
  return parse_sparse_prefill_config(nlohmann::json::parse(text), "cfg.json");
}

std::string error_of(const char* text) {
  try {
    parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SparsePrefillConfig, ReadsMInferenceLayerList) {
  const auto c = parse(R"([{"0": ["vertical_and_slash", 1000, 6096, 0.96],
                            "2": ["stream_llm", 100, 800, 0.9]},
                           {"0": ["block_sparse", 8, 1, 0.5]}])");
  EXPECT_EQ(c.pattern(0, 0).kind, PatternKind::kVerticalSlash);
  EXPECT_EQ(c.pattern(0, 0).vertical, 1000);
  EXPECT_EQ(c.pattern(0, 0).slash, 6096);
  EXPECT_EQ(c.pattern(0, 1).kind, PatternKind::kVerticalSlash);  // missing head: the default
  EXPECT_EQ(c.pattern(0, 1).slash, 6096);
  EXPECT_EQ(c.pattern(0, 2).kind, PatternKind::kAShape);
  EXPECT_EQ(c.pattern(0, 2).sink, 100);
  EXPECT_EQ(c.pattern(0, 2).local, 800);
  EXPECT_EQ(c.pattern(0, 9).kind, PatternKind::kVerticalSlash);
  EXPECT_EQ(c.pattern(1, 0).kind, PatternKind::kBlockSparse);
  EXPECT_EQ(c.pattern(1, 0).top_blocks, 8);
  EXPECT_EQ(c.pattern(5, 0).kind, PatternKind::kDense);  // missing layer: dense
}

TEST(SparsePrefillConfig, ReadsMMInferenceLayerObject) {
  const auto c = parse(R"({"layer-0": {"0": ["grid_attn", 196, false, true, false, 1024, 1],
                                       "1": ["a_shape", 128, 4096],
                                       "2": ["vs_attn", 1000, 2048, 257],
                                       "3": ["shuffle_q", "vs_attn", 1000, 2048],
                                       "4": null,
                                       "5": ["grid_attn", 0, true, true, false, 64, 14, 0]},
                           "layer-2": {}})");
  const HeadPattern g = c.pattern(0, 0);
  EXPECT_EQ(g.kind, PatternKind::kGrid);
  EXPECT_EQ(g.grid.stride, 196);
  EXPECT_FALSE(g.grid.hline);
  EXPECT_TRUE(g.grid.vline);
  EXPECT_EQ(g.grid.local, 1024);
  EXPECT_EQ(g.grid.phase, 1);
  EXPECT_EQ(c.pattern(0, 1).kind, PatternKind::kTriShape);  // the published runtime's a_shape
  EXPECT_EQ(c.pattern(0, 1).n_last, -1);
  EXPECT_EQ(c.pattern(0, 2).last_q, 257);
  EXPECT_EQ(c.pattern(0, 3).boundary, BoundaryKind::kQ);
  EXPECT_EQ(c.pattern(0, 4).kind, PatternKind::kVerticalSlash);  // null: the default
  EXPECT_EQ(c.pattern(0, 5).grid.stride, 0);                     // searched online
  EXPECT_EQ(c.pattern(1, 0).kind, PatternKind::kDense);
  EXPECT_EQ(c.pattern(2, 3).kind, PatternKind::kVerticalSlash);
}

TEST(SparsePrefillConfig, SaveLoadRoundTrip) {
  const auto c = parse(R"({"layer-1": {"0": ["grid_attn", 14, true, true, false, 256, 13],
                                       "1": ["tri_shape", 64, 512, 100], "2": ["dense"],
                                       "3": ["block_sparse", 100], "4": ["stream_llm", 128, 4096],
                                       "6": ["shuffle_q", "vs_attn", 3000, 6096],
                                       "7": ["2d_shuffle", "vs_attn", 500, 1000]}})");
  const auto dir = test::temp_dir("sparse_prefill_config");
  save_sparse_prefill_config(c, dir / "c.json");
  const auto back = load_sparse_prefill_config(dir / "c.json");
  EXPECT_EQ(sparse_prefill_config_json(back), sparse_prefill_config_json(c));
  EXPECT_EQ(back.pattern(1, 5).kind, PatternKind::kVerticalSlash);  // not listed: the default
  EXPECT_EQ(back.pattern(1, 6).vertical, 3000);
  EXPECT_EQ(back.pattern(1, 7).boundary, BoundaryKind::k2D);
}

TEST(SparsePrefillConfig, ErrorsNameTheFieldAtFault) {
  EXPECT_NE(error_of(R"({"layer-0": {"1": ["grid_attn", 10, false, true, false, 64, 10]}})")
                .find("cfg.json: layer-0 head 1: shift must be in [0, 9] (got 10)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"layer-0": {"1": ["vs_attn", 0, 10]}})").find("vertical_size"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"layer-0": {"1": ["grid_attn", 10, 1, true, false, 64, 0]}})")
                .find("hline (element 2) must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"layer-0": {"1": ["grid_attn", 10, true, true, true, 64, 0]}})")
                .find("slash lines are not implemented"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"layer-0": {"1": ["magic", 1]}})").find("unknown pattern 'magic'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"lyr-0": {}})").find("key 'lyr-0' must be layer-N"), std::string::npos);
  EXPECT_NE(error_of(R"({"layer-0": {"x": ["dense"]}})").find("head key 'x'"), std::string::npos);
  EXPECT_NE(error_of(R"({"layer-0": {"0": "dense"}})").find("must be an array"), std::string::npos);
  EXPECT_NE(error_of(R"("dense")").find("list of layers"), std::string::npos);
  const auto c = parse(R"({"layer-3": {"40": ["dense"]}})");
  EXPECT_THROW(check_config_fits(c, 3, 64, "cfg.json"), Error);
  EXPECT_THROW(check_config_fits(c, 36, 32, "cfg.json"), Error);
  EXPECT_NO_THROW(check_config_fits(c, 36, 41, "cfg.json"));
}

}  // namespace
}  // namespace dllm
