// Loading errors: every unsupported tokenizer.json feature and every broken file gives a
// dllm::Error that names the file and what is wrong.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace dllm {
namespace {

// A valid minimal byte-level BPE tokenizer.json to break one field at a time.
nlohmann::json minimal_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (const char* t : {"a", "b", "ab", "Ġ"}) vocab[t] = id++;
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array({"a b"})}}},
  };
}

// Loads `spec` and returns the error message (empty if it loaded).
std::string load_error_of_text(const std::string& contents) {
  const testing::TempTokenizerFile file(contents);
  try {
    Tokenizer::load(file.path());
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(file.path().string()), std::string::npos)
        << "error does not name the file: " << message;
    return message;
  }
  return "";
}
std::string load_error(const nlohmann::json& spec) {
  return load_error_of_text(spec.dump());
}

void expect_error(const nlohmann::json& spec, const std::string& fragment) {
  const std::string message = load_error(spec);
  EXPECT_NE(message.find(fragment), std::string::npos)
      << "want an error containing \"" << fragment << "\", got \"" << message << "\"";
}

TEST(TokenizerLoad, MinimalTokenizerLoads) {
  EXPECT_EQ(load_error(minimal_tokenizer()), "");
  const testing::TempTokenizerFile file(minimal_tokenizer());
  const Tokenizer tok = Tokenizer::load(file.dir());  // a directory works too
  EXPECT_EQ(tok.encode("ab a"), (std::vector<int32_t>{2, 3, 0}));
}

TEST(TokenizerLoad, UnsupportedFeaturesAreNamed) {
  auto with = [](const char* key, nlohmann::json value) {
    auto spec = minimal_tokenizer();
    spec[key] = std::move(value);
    return spec;
  };
  auto with_model = [](const char* key, nlohmann::json value) {
    auto spec = minimal_tokenizer();
    spec["model"][key] = std::move(value);
    return spec;
  };
  expect_error(with("normalizer", {{"type", "Lowercase"}}),
               "normalizer type 'Lowercase' is not supported");
  expect_error(with("normalizer", {{"type", "Sequence"},
                                   {"normalizers", {{{"type", "NFC"}}, {{"type", "NFKC"}}}}}),
               "normalizer type 'NFKC' is not supported");
  expect_error(with("pre_tokenizer", {{"type", "Whitespace"}}),
               "pre_tokenizer type 'Whitespace' is not supported");
  expect_error(
      with("pre_tokenizer",
           {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}}),
      "no ByteLevel step");
  expect_error(
      with("pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "ByteLevel"}},
              {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}}}}}),
      "Split after ByteLevel is not supported");
  expect_error(
      with("pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
              {{"type", "ByteLevel"}}}}}),
      "does not compile");
  expect_error(with("decoder", {{"type", "WordPiece"}}),
               "decoder type 'WordPiece' is not supported");
  expect_error(with("decoder", nullptr), "null decoder is not supported");
  expect_error(with("post_processor", {{"type", "Mystery"}}),
               "post_processor type 'Mystery' is not supported");
  expect_error(with("truncation", {{"max_length", 8}}), "truncation is not supported");
  expect_error(with("padding", {{"strategy", "BatchLongest"}}), "padding is not supported");
  expect_error(with_model("type", "WordPiece"), "model type 'WordPiece' is not supported");
  expect_error(with_model("byte_fallback", true), "byte_fallback is not supported");
  expect_error(with_model("dropout", 0.1), "dropout is not supported");
  expect_error(with_model("continuing_subword_prefix", "##"),
               "continuing_subword_prefix is not supported");
  expect_error(with_model("end_of_word_suffix", "</w>"), "end_of_word_suffix is not supported");
}

TEST(TokenizerLoad, BrokenFilesAreErrors) {
  EXPECT_NE(load_error_of_text("{\"model\": "), "");
  EXPECT_NE(load_error_of_text("{\"model\": ").find("invalid JSON"), std::string::npos);
  EXPECT_NE(load_error_of_text("").find("invalid JSON"), std::string::npos);
  EXPECT_NE(load_error_of_text("[1, 2]").find("not a tokenizer.json"), std::string::npos);
  EXPECT_NE(load_error_of_text("{}").find("\"model\" is missing"), std::string::npos);

  auto spec = minimal_tokenizer();
  spec["model"].erase("vocab");
  expect_error(spec, "model.vocab is missing");
  spec = minimal_tokenizer();
  spec["model"].erase("merges");
  expect_error(spec, "model.merges is missing");
  spec = minimal_tokenizer();
  spec["model"]["vocab"]["a"] = "zero";
  expect_error(spec, "model.vocab id of 'a' is not an integer");
  spec = minimal_tokenizer();
  spec["model"]["vocab"]["a"] = -3;
  expect_error(spec, "outside the accepted range");
  spec = minimal_tokenizer();
  spec["model"]["merges"] = nlohmann::json::array({"ab"});
  expect_error(spec, "model.merges[0] must be");
  spec["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b", "c"})});
  expect_error(spec, "model.merges[0] must be");
  spec["model"]["merges"] = nlohmann::json::array({"a x"});
  expect_error(spec, "uses token 'x' that is not in model.vocab");
  spec["model"]["merges"] = nlohmann::json::array({"b a"});
  expect_error(spec, "makes 'ba' that is not in model.vocab");
  spec = minimal_tokenizer();
  spec["added_tokens"] = nlohmann::json::array({{{"content", "<x>"}}});
  expect_error(spec, "added_tokens[0] needs a non-negative integer \"id\"");
}

TEST(TokenizerLoad, MissingFilesAreErrors) {
  const testing::TempTokenizerFile file(minimal_tokenizer());
  std::filesystem::remove(file.path());
  try {
    Tokenizer::load(file.dir());
    FAIL() << "loaded a directory without tokenizer.json";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tokenizer.json"), std::string::npos) << e.what();
  }
  try {
    Tokenizer::load(file.dir() / "nope.json");
    FAIL() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.json: no such file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dllm
