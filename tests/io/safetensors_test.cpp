// safetensors reader: values of every supported dtype, sharded checkpoints, and corrupt, truncated
// or hostile files — each a dllm::Error naming the file (and tensor), never a crash.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "core/error.h"
#include "support/safetensors_writer.h"
#include "support/test_paths.h"

namespace dllm {
namespace {

using test::write_file;

// Expects `f` to throw dllm::Error whose message contains every needle.
template <class F>
void expect_error(F f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning " << *needles.begin();
  } catch (const Error& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(Safetensors, ReadsEveryDtype) {
  const auto dir = test::temp_dir("st-dtypes");
  // F16 bit patterns: 1.0, -2.0, 0.5, 65504 (max), smallest subnormal 2^-24, -0, +inf.
  const std::vector<uint16_t> half = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x8000, 0x7c00};
  write_file(
      dir / "model.safetensors",
      test::safetensors_bytes({test::f32_tensor("a", {2, 3}, {1, -2, 3.5f, 1e-30f, -0.0f, 7}),
                               test::bf16_tensor("b", {3}, {1.0f, -3.0f, 0.15625f}),
                               test::f16_tensor("c", {7}, half)}));
  const TensorStore store = TensorStore::open(dir);
  EXPECT_EQ(store.all().size(), 3u);
  EXPECT_EQ(store.load_f32("a", {2, 3}).data, (std::vector<float>{1, -2, 3.5f, 1e-30f, -0.0f, 7}));
  EXPECT_EQ(store.load_f32("b", {3}).data, (std::vector<float>{1.0f, -3.0f, 0.15625f}));
  const auto c = store.load_f32("c", {7}).data;
  EXPECT_EQ(c[0], 1.0f);
  EXPECT_EQ(c[1], -2.0f);
  EXPECT_EQ(c[2], 0.5f);
  EXPECT_EQ(c[3], 65504.0f);
  EXPECT_EQ(c[4], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::signbit(c[5]) && c[5] == 0.0f);
  EXPECT_TRUE(std::isinf(c[6]));
  expect_error(
      [&] {
        store.load_f32("a", {3, 2});
      },
      {"model.safetensors", "'a'", "[2, 3]", "[3, 2]"});
  expect_error([&] { store.get("zzz"); }, {"missing tensor 'zzz'"});
}

TEST(Safetensors, UnsupportedDtypeIsListedButNotLoadable) {
  const auto dir = test::temp_dir("st-i64");
  test::RawTensor ids{"ids", "I64", {2}, std::vector<unsigned char>(16, 0)};
  write_file(dir / "model.safetensors", test::safetensors_bytes({ids}));
  const TensorStore store = TensorStore::open(dir);
  expect_error([&] { store.load_f32("ids", {2}); }, {"'ids'", "I64", "BF16, F16, F32"});
}

TEST(Safetensors, ShardedCheckpoint) {
  const auto dir = test::temp_dir("st-shards");
  write_file(dir / "a.safetensors", test::safetensors_bytes({test::f32_tensor("x", {1}, {1})}));
  write_file(dir / "b.safetensors", test::safetensors_bytes({test::f32_tensor("y", {1}, {2})}));
  write_file(dir / "model.safetensors.index.json",
             R"({"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})");
  const TensorStore store = TensorStore::open(dir);
  EXPECT_EQ(store.num_files(), 2u);
  EXPECT_EQ(store.load_f32("y", {1}).data[0], 2.0f);

  write_file(dir / "model.safetensors.index.json",
             R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}})");
  expect_error([&] { TensorStore::open(dir); }, {"index.json", "'y'", "a.safetensors"});
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"x": "../a.safetensors"}})");
  expect_error([&] { TensorStore::open(dir); }, {"must be a file inside the checkpoint"});
  write_file(dir / "model.safetensors.index.json",
             R"({"weight_map": {"x": "missing.safetensors"}})");
  expect_error([&] { TensorStore::open(dir); }, {"missing.safetensors", "cannot open"});
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": [1, 2]})");
  expect_error([&] { TensorStore::open(dir); }, {"weight_map"});
  write_file(dir / "model.safetensors.index.json", "{not json");
  expect_error([&] { TensorStore::open(dir); }, {"model.safetensors.index.json", "invalid JSON"});
  // The same tensor in two shards.
  write_file(dir / "b.safetensors", test::safetensors_bytes({test::f32_tensor("x", {1}, {2})}));
  std::filesystem::remove(dir / "model.safetensors.index.json");
  expect_error([&] { TensorStore::open(dir); }, {"several .safetensors files"});
}

struct BadHeader {
  std::string name, header, data, needle;
};

TEST(Safetensors, HostileHeadersAreRejected) {
  const std::string d8(8, '\0');
  const std::vector<BadHeader> cases = {
      {"not json", "{\"a\": ", d8, "invalid JSON"},
      {"array", "[1,2]", d8, "not a JSON object"},
      {"entry not object", R"({"a": 5})", d8, "'a': entry is not an object"},
      {"no dtype", R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", d8, "'dtype'"},
      {"unknown dtype", R"({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", d8,
       "unknown dtype 'Q4'"},
      {"negative dim", R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", d8,
       "non-negative"},
      {"float dim", R"({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", d8,
       "non-negative"},
      {"bad offsets", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", d8,
       "two integers"},
      {"negative offset", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", d8,
       "non-negative"},
      {"reversed", R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", d8,
       "reversed"},
      {"past end", R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", d8,
       "past the end"},
      {"size mismatch", R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", d8,
       "does not match"},
      {"huge shape",
       R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 8]}})",
       d8, "too large"},
      {"wraps to zero",
       R"({"a": {"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", d8,
       "too large"},
      {"overlap",
       R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       d8, "overlapping"},
      {"metadata not strings", R"({"__metadata__": {"x": 1}})", "", "__metadata__"},
  };
  const auto dir = test::temp_dir("st-hostile");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto path = dir / "model.safetensors";
    write_file(path, test::safetensors_raw(c.header, c.data));
    expect_error([&] { SafetensorsFile f(path); }, {"model.safetensors", c.needle});
  }
}

TEST(Safetensors, HeaderLengthFieldIsChecked) {
  const auto dir = test::temp_dir("st-len");
  const auto path = dir / "x.safetensors";
  write_file(path, std::string("\x05\x00\x00", 3));
  expect_error([&] { SafetensorsFile f(path); }, {"x.safetensors", "at least 8"});
  std::string huge(8, '\xff');
  write_file(path, huge + "{}");
  expect_error([&] { SafetensorsFile f(path); }, {"too large"});
  std::string claims(8, '\0');
  claims[0] = 100;
  write_file(path, claims + "{}");
  expect_error([&] { SafetensorsFile f(path); }, {"truncated"});
  write_file(path, "");
  expect_error([&] { SafetensorsFile f(path); }, {"at least 8"});
  expect_error([&] { SafetensorsFile f(dir / "nope.safetensors"); },
               {"nope.safetensors", "cannot open"});
}

// Every truncation of a real fixture shard, and random byte corruption of its header, must either
// load or fail with an Error — never crash or read out of bounds (run under ASan/valgrind too).
TEST(Safetensors, TruncatedAndCorruptedFixtureCopies) {
  const auto src = test::model_fixture("llada-tiny") / "model.safetensors";
  std::ifstream in(src, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i)
    hlen = (hlen << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  const auto dir = test::temp_dir("st-trunc");
  const auto path = dir / "model.safetensors";

  std::vector<size_t> cuts;
  for (size_t n = 0; n < 8 + hlen + 64; n += 7) cuts.push_back(n);
  for (size_t n = bytes.size() - 600; n < bytes.size(); n += 13) cuts.push_back(n);
  int errors = 0;
  for (size_t n : cuts) {
    write_file(path, bytes.substr(0, n));
    try {
      SafetensorsFile f(path);
    } catch (const Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos);
    }
  }
  EXPECT_EQ(errors, static_cast<int>(cuts.size())) << "every truncated copy must be rejected";

  std::mt19937 rng(7);
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bad[8 + rng() % hlen] = static_cast<char>(rng() & 0xff);
    write_file(path, bad);
    try {
      SafetensorsFile f(path);
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(loaded + rejected, 300);
}

}  // namespace
}  // namespace dllm
