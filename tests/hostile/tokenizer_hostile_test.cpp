// Hostile tokenizer.json files (issue 19): ids that would size tables in gigabytes, repeated and
// negative ids, malformed merges, deep nesting and non-regular files. Each load fails fast with
// an error naming the file and the entry.
#include <gtest/gtest.h>

#include <chrono>

#include "hostile/hostile_test_util.h"
#include "tokenizer/tokenizer_test_util.h"

namespace dllm {
namespace {

using hostile::contains;
using hostile::error_of;

nlohmann::json tokenizer_with(const nlohmann::json& vocab,
                              const nlohmann::json& merges = nlohmann::json::array(),
                              const nlohmann::json& added = nlohmann::json::array()) {
  return {{"added_tokens", added},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::string load_text_error(const std::string& text) {
  const testing::TempTokenizerFile file(text);
  return error_of([&] { Tokenizer::load(file.path()); });
}
std::string load_error(const nlohmann::json& spec) {
  return load_text_error(spec.dump());
}

TEST(HostileTokenizer, HugeVocabIdIsRefusedWithoutAllocating) {
  const auto start = std::chrono::steady_clock::now();
  const std::string e = load_error(tokenizer_with({{"a", 0}, {"b", 2147483646}}));
  EXPECT_TRUE(contains(e,
                       "model.vocab id 2147483646 of token 'b' is outside the accepted range "
                       "0..65537"))
      << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(HostileTokenizer, HugeAddedTokenIdIsRefused) {
  const nlohmann::json added = {{{"id", 2000000000}, {"content", "<x>"}, {"special", true}}};
  const std::string e = load_error(tokenizer_with({{"a", 0}}, nlohmann::json::array(), added));
  EXPECT_TRUE(contains(e, "added_tokens[0] id 2000000000 is outside the accepted range 0..65537"))
      << e;
  const nlohmann::json wrapped = {{{"id", UINT64_MAX}, {"content", "<x>"}}};
  EXPECT_TRUE(contains(load_error(tokenizer_with({{"a", 0}}, nlohmann::json::array(), wrapped)),
                       "added_tokens[0] id 18446744073709551615 is outside the accepted range"));
}

TEST(HostileTokenizer, HolesWithinTheAllowanceStillLoad) {
  // Padded vocabularies leave unused ids; a gap below the allowance is fine.
  const testing::TempTokenizerFile file(tokenizer_with({{"a", 0}, {"b", 60000}}));
  EXPECT_EQ(Tokenizer::load(file.path()).vocab_size(), 60001);
}

TEST(HostileTokenizer, NegativeAndRepeatedIds) {
  EXPECT_TRUE(contains(load_error(tokenizer_with({{"a", -1}})),
                       "model.vocab id -1 of token 'a' is outside the accepted range"));
  EXPECT_TRUE(contains(load_error(tokenizer_with({{"a", 0}, {"b", 0}})),
                       "model.vocab tokens 'a' and 'b' both have id 0; ids must be unique"));
  EXPECT_TRUE(
      contains(load_text_error(R"({"model": {"type": "BPE", "vocab": {"a": 1.5}, "merges": []}})"),
               "model.vocab id of 'a' is not an integer"));
}

TEST(HostileTokenizer, MalformedMergesNameTheEntry) {
  const nlohmann::json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}};
  EXPECT_TRUE(contains(load_error(tokenizer_with(vocab, {"ab"})), "model.merges[0] must be"));
  EXPECT_TRUE(
      contains(load_error(tokenizer_with(vocab, {{"a", "b", "c"}})), "model.merges[0] must be"));
  EXPECT_TRUE(contains(load_error(tokenizer_with(vocab, {"a b", "a zz"})),
                       "model.merges[1] 'a zz' uses token 'zz' that is not in model.vocab"));
  EXPECT_TRUE(
      contains(load_error(tokenizer_with(vocab, nlohmann::json::array({nlohmann::json::array(
                                                    {"a", nlohmann::json::object({{"x", 1}})})}))),
               "model.merges[0] must be"));
}

TEST(HostileTokenizer, DeepNestingIsRefused) {
  const std::string text = "{\"normalizer\": " + std::string(200000, '[') + "}";
  EXPECT_TRUE(contains(load_text_error(text), "nested deeper than 128 levels"));
}

TEST(HostileTokenizer, FifoIsRefused) {
  const testing::TempTokenizerFile file(std::string("{}"));
  hostile::make_fifo(file.path());
  EXPECT_TRUE(contains(error_of([&] { Tokenizer::load(file.dir()); }),
                       "tokenizer.json: not a regular file (it is a FIFO)"));
}

}  // namespace
}  // namespace dllm
