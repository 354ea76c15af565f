// The real Qwen3 tokenizer against goldens from Hugging Face tokenizers (tools/
// make_tokenizer_goldens.py): identical ids for every corpus text and line, identical decoded
// text with and without special tokens, and streaming output equal to whole decoding.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer_test_util.h"

namespace dllm {
namespace {

using testing::qwen3_goldens;
using testing::qwen3_tokenizer;

std::vector<int32_t> ids_of(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

TEST(Qwen3Tokenizer, EncodeAndDecodeMatchHuggingFace) {
  const Tokenizer& tok = qwen3_tokenizer();
  const auto& cases = qwen3_goldens()["cases"];
  ASSERT_GT(cases.size(), 300u);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    const std::string text = c["text"];
    const std::vector<int32_t> expected = ids_of(c["ids"]);
    const std::vector<int32_t> ids = tok.encode(text);
    if (ids != expected) {
      size_t first = 0;
      while (first < ids.size() && first < expected.size() && ids[first] == expected[first])
        ++first;
      ADD_FAILURE() << name << ": ids differ from Hugging Face at index " << first << " (got "
                    << (first < ids.size() ? std::to_string(ids[first]) : "end") << ", want "
                    << (first < expected.size() ? std::to_string(expected[first]) : "end") << ")";
      if (++failures > 10) break;
      continue;
    }
    EXPECT_EQ(tok.decode(ids, false), c["decoded"].get<std::string>()) << name;
    EXPECT_EQ(tok.decode(ids, true), c["decoded_skip_special"].get<std::string>()) << name;
  }
}

TEST(Qwen3Tokenizer, DecodeOfArbitraryIdsMatchesHuggingFace) {
  // Random ids full of special tokens and lone high bytes: broken UTF-8 must become U+FFFD
  // exactly where Hugging Face puts it.
  const Tokenizer& tok = qwen3_tokenizer();
  for (const auto& c : qwen3_goldens()["decode_cases"]) {
    const std::vector<int32_t> ids = ids_of(c["ids"]);
    EXPECT_EQ(tok.decode(ids, c["skip_special_tokens"].get<bool>()), c["text"].get<std::string>())
        << c["ids"].dump();
  }
}

TEST(Qwen3Tokenizer, VocabularyMatchesHuggingFace) {
  const Tokenizer& tok = qwen3_tokenizer();
  const auto& g = qwen3_goldens();
  EXPECT_EQ(tok.vocab_size(), g["vocab_size"].get<int32_t>());
  for (const auto& s : g["vocab_samples"]) {
    const int32_t id = s["id"];
    const std::string token = s["token"];
    EXPECT_EQ(tok.id_to_token(id), token) << id;
    EXPECT_EQ(tok.token_to_id(token), id) << token;
  }
  std::vector<int32_t> special = ids_of(g["special_ids"]);
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const bool want = std::find(special.begin(), special.end(), id) != special.end();
    ASSERT_EQ(tok.is_special(id), want) << id;
  }
  EXPECT_FALSE(tok.token_to_id("no such token in the vocabulary").has_value());
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(tok.vocab_size()));
}

TEST(Qwen3Tokenizer, StreamingDetokenizerEqualsDecode) {
  const Tokenizer& tok = qwen3_tokenizer();
  size_t held_back = 0;  // how often a push returned less than its token's bytes
  for (const auto& c : qwen3_goldens()["cases"]) {
    const std::vector<int32_t> ids = ids_of(c["ids"]);
    for (bool skip : {false, true}) {
      StreamingDetokenizer stream(tok, skip);
      std::string joined;
      for (int32_t id : ids) {
        const std::string chunk = stream.push(id);
        ASSERT_TRUE(testing::is_valid_utf8(chunk)) << c["name"] << " id " << id;
        if (chunk.empty() && !(skip && tok.is_special(id))) ++held_back;
        joined += chunk;
      }
      joined += stream.flush();
      ASSERT_EQ(joined, tok.decode(ids, skip)) << c["name"] << " skip=" << skip;
      ASSERT_EQ(joined, c[skip ? "decoded_skip_special" : "decoded"].get<std::string>());
    }
  }
  EXPECT_GT(held_back, 100u);  // the emoji/CJK texts really split characters across tokens
}

TEST(Qwen3Tokenizer, StreamingDetokenizerOnArbitraryIds) {
  // Ends inside a character, special tokens between the bytes of one character, and so on.
  const Tokenizer& tok = qwen3_tokenizer();
  for (const auto& c : qwen3_goldens()["decode_cases"]) {
    const bool skip = c["skip_special_tokens"];
    StreamingDetokenizer stream(tok, skip);
    std::string joined;
    for (int32_t id : ids_of(c["ids"])) {
      const std::string chunk = stream.push(id);
      ASSERT_TRUE(testing::is_valid_utf8(chunk));
      joined += chunk;
    }
    joined += stream.flush();
    EXPECT_EQ(joined, c["text"].get<std::string>()) << c["ids"].dump();
  }
}

TEST(Qwen3Tokenizer, ConcurrentEncodersAgree) {
  // One tokenizer shared by several threads (as the server does): same ids as Hugging Face, and
  // the shared word cache stays consistent.
  const Tokenizer& tok = qwen3_tokenizer();
  const auto& cases = qwen3_goldens()["cases"];
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < cases.size() * 2; i += 3) {
        const auto& c = cases[i % cases.size()];
        if (tok.encode(c["text"].get<std::string>()) != ids_of(c["ids"])) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Qwen3Tokenizer, BadIdsAndTextAreErrors) {
  const Tokenizer& tok = qwen3_tokenizer();
  const std::vector<int32_t> too_big{9707, tok.vocab_size()};
  const std::vector<int32_t> negative{-1};
  EXPECT_THROW(tok.decode(too_big, false), Error);
  EXPECT_THROW(tok.decode(negative, true), Error);
  EXPECT_THROW(tok.id_to_token(tok.vocab_size()), Error);
  EXPECT_THROW(tok.token_bytes(-5), Error);
  StreamingDetokenizer stream(tok, false);
  EXPECT_THROW(stream.push(1 << 30), Error);
  try {
    tok.decode(too_big, false);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("151669"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok.encode("bad \xFF byte"), Error);
  EXPECT_THROW(tok.encode("truncated \xE4\xBD"), Error);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode(std::vector<int32_t>{}, false), "");
}

}  // namespace
}  // namespace dllm
