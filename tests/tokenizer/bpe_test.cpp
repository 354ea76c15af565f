// Byte-level BPE on hand-made tokenizer.json files: merge order, both merge formats, the two
// merge strategies (short and long words) agreeing, ignore_merges.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer_test_util.h"

namespace dllm {
namespace {

// A tokenizer.json whose vocabulary is the 256 byte-level characters (ids 0..255 in byte order)
// plus `extra` tokens numbered from 256, with the given merges.
nlohmann::json tiny_tokenizer(const std::vector<std::string>& extra, nlohmann::json merges) {
  nlohmann::json vocab = nlohmann::json::object();
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  for (int b = 0; b < 256; ++b) vocab[alphabet.encode(std::string(1, static_cast<char>(b)))] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + static_cast<int>(i);
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", false}}},
  };
}

TEST(Bpe, MergesApplyInRankOrderInBothFormats) {
  // Ranks: "b c" before "a b", so "abc" -> a + bc, not ab + c; then "a bc" joins them.
  const std::vector<std::string> extra{"bc", "ab", "abc", "Ġa"};
  const auto as_strings = nlohmann::json::array({"b c", "a b", "a bc", "Ġ a"});
  auto as_pairs = nlohmann::json::array();
  for (const auto& [l, r] : {std::pair{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"Ġ", "a"}})
    as_pairs.push_back(nlohmann::json::array({l, r}));
  for (const auto& merges : {as_strings, as_pairs}) {
    const testing::TempTokenizerFile file(tiny_tokenizer(extra, merges));
    const Tokenizer tok = Tokenizer::load(file.path());
    // bc=256 ab=257 abc=258 Ġa=259; 'a'=97 'b'=98 'c'=99 'x'=120 ' '=Ġ is byte 32.
    EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{258})) << merges.dump();
    EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{257}));
    EXPECT_EQ(tok.encode("abab"), (std::vector<int32_t>{257, 257}));
    EXPECT_EQ(tok.encode("xbc a"), (std::vector<int32_t>{120, 256, 259}));
    EXPECT_EQ(tok.decode(std::vector<int32_t>{258, 259}, false), "abc a");
    EXPECT_EQ(tok.vocab_size(), 260);
    EXPECT_EQ(tok.id_to_token(259), "Ġa");
  }
}

TEST(Bpe, LeftmostPairWinsOnEqualRank) {
  // "aaa" with the single merge "a a": the left pair merges first -> [aa, a].
  const testing::TempTokenizerFile file(tiny_tokenizer({"aa"}, nlohmann::json::array({"a a"})));
  const Tokenizer tok = Tokenizer::load(file.path());
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{256, 97}));
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{256, 256}));
}

TEST(Bpe, IgnoreMergesTakesWholeVocabularyWords) {
  auto spec = tiny_tokenizer({"ab", "xyz"}, nlohmann::json::array({"a b"}));
  for (bool ignore : {false, true}) {
    spec["model"]["ignore_merges"] = ignore;
    const testing::TempTokenizerFile file(spec);
    const Tokenizer tok = Tokenizer::load(file.path());
    // No merge builds "xyz"; with ignore_merges the word is looked up whole.
    const std::vector<int32_t> want =
        ignore ? std::vector<int32_t>{257} : std::vector<int32_t>{120, 121, 122};
    EXPECT_EQ(tok.encode("xyz"), want);
    EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{256}));
  }
}

TEST(Bpe, ScanAndHeapMergingAgree) {
  // The short-word and long-word strategies must pick the same merges; compare them on random
  // words over a small alphabet with many overlapping merges.
  BpeSource source;
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.push_back(alphabet.encode(std::string(1, static_cast<char>(b))));
  std::vector<std::pair<std::string, std::string>> merges;
  std::mt19937 rng(7);
  const std::string letters = "abcd";
  for (int i = 0; i < 60; ++i) {
    const std::string& l =
        i < 16 ? std::string(1, letters[i % 4]) : tokens[256 + rng() % (tokens.size() - 256)];
    const std::string r = i < 16 ? std::string(1, letters[i / 4]) : tokens[97 + rng() % 4];
    const std::string joined = l + r;
    if (std::find(tokens.begin(), tokens.end(), joined) != tokens.end()) continue;
    tokens.push_back(joined);
    merges.emplace_back(l, r);
  }
  for (size_t id = 0; id < tokens.size(); ++id)
    source.vocab.push_back({source.strings.add(tokens[id]), static_cast<int64_t>(id)});
  for (const auto& [l, r] : merges)
    source.merges.push_back({source.strings.add(l), source.strings.add(r)});
  const BpeModel model(std::move(source), "test");

  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> symbols(1 + rng() % 120);
    for (auto& s : symbols) s = 97 + static_cast<int32_t>(rng() % 4);
    std::vector<int32_t> by_scan, by_heap;
    model.merge_by_scan(symbols, by_scan);
    model.merge_by_heap(symbols, by_heap);
    ASSERT_EQ(by_scan, by_heap) << "trial " << trial;
    ASSERT_LT(by_scan.size(), symbols.size() + (symbols.size() == 1 ? 1 : 0));
  }
}

}  // namespace
}  // namespace dllm
