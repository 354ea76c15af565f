// Untrusted JSON and text files (issue 19): nesting limits with positions, syntax errors with
// positions, number overflow, and only regular files opened (a FIFO must not block).
#include <gtest/gtest.h>

#include "hostile/hostile_test_util.h"
#include "io/json_file.h"
#include "io/mapped_file.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using hostile::contains;
using hostile::error_of;
namespace fs = std::filesystem;

std::string nested(int depth) {
  return std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']');
}

TEST(HostileJson, NestingLimitNamesSourcePositionAndLimit) {
  EXPECT_NO_THROW(parse_json_text(nested(kJsonDepthLimit), "body"));
  const std::string e = error_of([] { parse_json_text("{\"a\":\n" + nested(100000), "body"); });
  EXPECT_TRUE(contains(e, "body: JSON nested deeper than 64 levels at line 2, column 64")) << e;
  EXPECT_TRUE(contains(e, "1..64")) << e;
}

TEST(HostileJson, BracketsInsideStringsDoNotCount) {
  const std::string text = "[\"" + std::string(1000, '[') + "\\\"[\"]";
  EXPECT_EQ(parse_json_text(text, "s")[0].get<std::string>().size(), 1002u);
}

TEST(HostileJson, OrderedParseKeepsKeyOrderAndLimit) {
  const auto j = parse_json_text<nlohmann::ordered_json>(R"({"b": 1, "a": 2})", "m");
  EXPECT_EQ(j.begin().key(), "b");
  EXPECT_TRUE(contains(error_of([] { parse_json_text<nlohmann::ordered_json>(nested(65), "m"); }),
                       "nested deeper than 64"));
}

TEST(HostileJson, SyntaxErrorNamesLineColumnAndByte) {
  const std::string e = error_of([] { parse_json_text("{\n  \"a\": 1,\n  oops\n}", "cfg"); });
  EXPECT_TRUE(contains(e, "cfg: invalid JSON at line 3, column 3 (byte 14)")) << e;
}

TEST(HostileJson, NumberOverflowIsANamedError) {
  const std::string e = error_of([] { parse_json_text("{\"rope_theta\": 1e400}", "config.json"); });
  EXPECT_TRUE(contains(e, "config.json: invalid JSON")) << e;
}

TEST(HostileJson, FifoIsRefusedWithoutBlocking) {
  const fs::path dir = test::temp_dir("fifo");
  hostile::make_fifo(dir / "config.json");
  const std::string e = error_of([&] { read_json_file(dir / "config.json"); });
  EXPECT_TRUE(contains(e, "config.json: not a regular file (it is a FIFO)")) << e;
  EXPECT_TRUE(contains(error_of([&] { MappedFile m(dir / "config.json"); }), "a FIFO"));
  fs::remove_all(dir);
}

TEST(HostileJson, DirectoryAndDeviceAreRefused) {
  const fs::path dir = test::temp_dir("dirjson");
  fs::create_directory(dir / "tokenizer.json");
  EXPECT_TRUE(contains(error_of([&] { read_text_file(dir / "tokenizer.json"); }),
                       "not a regular file (it is a directory)"));
  EXPECT_TRUE(contains(error_of([] { read_text_file("/dev/zero"); }), "a character device"));
  fs::remove_all(dir);
}

TEST(HostileJson, SizeCapNamesBothSizes) {
  const fs::path dir = test::temp_dir("bigjson");
  hostile::write_text(dir / "a.json", std::string(100, ' '));
  const std::string e = error_of([&] { read_text_file(dir / "a.json", 10); });
  EXPECT_TRUE(contains(e, "a.json: file is 100 bytes; at most 10 bytes are accepted")) << e;
  fs::remove_all(dir);
}

TEST(HostileJson, MissingOptionalFileIsNullopt) {
  EXPECT_EQ(read_json_file_if_exists("/nonexistent/generation_config.json"), std::nullopt);
}

}  // namespace
}  // namespace dllm
