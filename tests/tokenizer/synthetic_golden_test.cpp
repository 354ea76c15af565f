// Small tokenizers built with Hugging Face tokenizers in tools/make_tokenizer_goldens.py: every
// Split behavior (with and without invert, regex and string patterns, empty matches), ByteLevel
// options, added-token flags, legacy merges, ignore_merges and no-op post-processors.
#include <gtest/gtest.h>

#include <deque>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer_test_util.h"

namespace dllm {
namespace {

using testing::synthetic_goldens;

TEST(SplitPreTokenizer, PiecesMatchHuggingFace) {
  const auto& splits = synthetic_goldens()["splits"];
  ASSERT_EQ(splits.size(), 60u);
  for (const auto& s : splits) {
    const PreTokenizer pre = PreTokenizer::from_json(s["spec"], "synthetic");
    for (const auto& input : s["inputs"]) {
      const std::string text = input["text"];
      std::vector<std::string_view> pieces;
      std::deque<std::string> storage;
      pre.split(text, pieces, storage);
      const std::vector<std::string> got(pieces.begin(), pieces.end());
      EXPECT_EQ(got, input["pieces"].get<std::vector<std::string>>())
          << s["spec"].dump() << " on '" << text << "'";
    }
  }
}

TEST(SyntheticTokenizers, EncodeAndDecodeMatchHuggingFace) {
  const auto& tokenizers = synthetic_goldens()["tokenizers"];
  ASSERT_EQ(tokenizers.size(), 7u);
  for (const auto& t : tokenizers) {
    const std::string name = t["name"];
    const testing::TempTokenizerFile file(t["tokenizer_json"]);
    const Tokenizer tok = Tokenizer::load(file.path());
    for (const auto& c : t["cases"]) {
      const std::string text = c["text"];
      const auto expected = c["ids"].get<std::vector<int32_t>>();
      const std::vector<int32_t> ids = tok.encode(text);
      EXPECT_EQ(ids, expected) << name << " on " << c["name"];
      EXPECT_EQ(tok.decode(expected, false), c["decoded"].get<std::string>()) << name;
      EXPECT_EQ(tok.decode(expected, true), c["decoded_skip_special"].get<std::string>()) << name;
    }
  }
}

TEST(SyntheticTokenizers, BothMergeFormatsGiveTheSameTokenizer) {
  const auto& tokenizers = synthetic_goldens()["tokenizers"];
  const nlohmann::json* pairs = nullptr;
  const nlohmann::json* strings = nullptr;
  for (const auto& t : tokenizers) {
    if (t["name"] == "legacy_merges") strings = &t;
    if (t["name"] == "added_tokens_nfc") pairs = &t;
  }
  ASSERT_TRUE(pairs && strings);
  ASSERT_TRUE((*strings)["tokenizer_json"]["model"]["merges"][0].is_string());
  ASSERT_TRUE((*pairs)["tokenizer_json"]["model"]["merges"][0].is_array());
  const testing::TempTokenizerFile a((*pairs)["tokenizer_json"]), b((*strings)["tokenizer_json"]);
  const Tokenizer ta = Tokenizer::load(a.path()), tb = Tokenizer::load(b.dir());
  for (const char* text : {"The quick brown fox jumps over the lazy dog.", "hello there 12345"})
    EXPECT_EQ(ta.encode(text), tb.encode(text)) << text;
}

}  // namespace
}  // namespace dllm
