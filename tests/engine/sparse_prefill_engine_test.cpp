// EngineConfig::sparse_prefill (--sparse-prefill) through the public API on the trained tiny-block
// model: a config whose patterns keep every key (A-shape with a band longer than any prompt, and
// vertical-slash with more columns and diagonals than tokens) answers exactly as the dense
// prefill; a config that drops almost everything changes the prefill; bad configs fail at
// construction naming the file and the entry.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "dllm/engine.h"
#include "support/sparse_prefill_config_file.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

EngineConfig tiny_block() {
  EngineConfig c;
  c.model = (test::models_dir() / "tiny-block").string();
  c.device = "cpu";
  return c;
}

Request question(const std::string& q) {
  Request r;
  r.messages_json = R"([{"role": "user", "content": ")" + q + R"("}])";
  r.max_tokens = 16;
  return r;
}

std::string write_config(const std::string& name, const std::string& per_head) {
  const auto path = test::temp_dir("sparse_prefill_engine") / name;
  test::write_tiny_block_sparse_config(path, per_head);
  return path.string();
}

TEST(SparsePrefillEngine, PatternsThatKeepEveryKeyAnswerAsDense) {
  Engine dense(tiny_block());
  const RequestResult want = dense.generate(question("What is 123 + 456?"));
  for (const char* entry : {R"(["stream_llm", 0, 100000])", R"(["vs_attn", 100000, 100000, 64])"}) {
    SCOPED_TRACE(entry);
    EngineConfig c = tiny_block();
    c.sparse_prefill = write_config("keep_all.json", entry);
    Engine sparse(c);
    const RequestResult got = sparse.generate(question("What is 123 + 456?"));
    EXPECT_EQ(got.token_ids, want.token_ids);
    EXPECT_EQ(got.text, "579");
  }
}

// Request::sparse_prefill: a config of EngineConfig::sparse_prefill_dir by name, or "none".
TEST(SparsePrefillEngine, RequestsChooseALoadedConfigByName) {
  Engine dense(tiny_block());
  const RequestResult want = dense.generate(question("What is 123 + 456?"));
  const auto dir = test::temp_dir("sparse_prefill_engine_named");
  std::filesystem::copy_file(write_config("keep_all.json", R"(["stream_llm", 0, 100000])"),
                             dir / "keep-all.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(write_config("tiny.json", R"(["stream_llm", 1, 2])"),
                             dir / "tiny-band.json",
                             std::filesystem::copy_options::overwrite_existing);
  EngineConfig c = tiny_block();
  c.sparse_prefill_dir = dir.string();
  Engine named(c);
  EXPECT_EQ(named.sparse_prefill_names(),
            (std::vector<std::string>{"none", "keep-all", "tiny-band"}));
  Request r = question("What is 123 + 456?");
  EXPECT_EQ(named.generate(r).token_ids, want.token_ids) << "no field: no sparse prefill";
  r.sparse_prefill = "keep-all";
  EXPECT_EQ(named.generate(r).token_ids, want.token_ids);
  r.sparse_prefill = "none";
  EXPECT_EQ(named.generate(r).token_ids, want.token_ids);
  r.sparse_prefill = "tiny-band";
  EXPECT_NE(named.generate(r).token_ids, want.token_ids)
      << "a prefill seeing two keys per row must answer otherwise";
  r.sparse_prefill = "video";
  try {
    named.submit(r);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: none, keep-all, tiny-band"), std::string::npos)
        << e.what();
  }
  // "none" is taken: a config may not be named so.
  std::filesystem::copy_file(dir / "keep-all.json", dir / "none.json");
  EXPECT_THROW(Engine e(c), Error);
}

TEST(SparsePrefillEngine, BadConfigsFailAtConstruction) {
  EngineConfig c = tiny_block();
  c.sparse_prefill = write_config("bad.json", R"(["grid_attn", 4, false, true, false, 64, 9])");
  try {
    Engine e(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer-0 head 0: shift must be in [0, 3] (got 9)"),
              std::string::npos)
        << e.what();
  }
  const auto dir = test::temp_dir("sparse_prefill_engine_fit");
  std::ofstream(dir / "wide.json") << R"({"layer-6": {"0": ["dense"]}})";
  c.sparse_prefill = (dir / "wide.json").string();
  EXPECT_THROW(Engine e(c), Error);
}

}  // namespace
}  // namespace dllm
