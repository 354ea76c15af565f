// Shared helpers for the tokenizer tests: fixture paths, golden files, temporary tokenizer.json.
#pragma once

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "support/test_paths.h"

namespace dllm::testing {

inline std::filesystem::path tokenizer_fixtures() {
  return dllm::test::fixtures_dir() / "tokenizers";
}

// The real Qwen3 tokenizer, loaded once per test process.
inline const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(tokenizer_fixtures() / "qwen3");
  return tokenizer;
}

inline const nlohmann::json& qwen3_goldens() {
  static const nlohmann::json goldens = read_json_file(tokenizer_fixtures() / "qwen3_goldens.json");
  return goldens;
}

inline const nlohmann::json& synthetic_goldens() {
  static const nlohmann::json goldens =
      read_json_file(tokenizer_fixtures() / "synthetic_goldens.json");
  return goldens;
}

// A file in a fresh temporary directory, removed with the object.
class TempTokenizerFile {
 public:
  explicit TempTokenizerFile(const std::string& contents) {
    std::string pattern = (std::filesystem::temp_directory_path() / "dllm_tok_XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    std::ofstream(path(), std::ios::binary) << contents;
  }
  explicit TempTokenizerFile(const nlohmann::json& spec) : TempTokenizerFile(spec.dump()) {}
  ~TempTokenizerFile() { std::filesystem::remove_all(dir_); }
  std::filesystem::path path() const { return dir_ / "tokenizer.json"; }
  std::filesystem::path dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

inline bool is_valid_utf8(std::string_view s) {
  return utf8::find_invalid(s) == std::string::npos;
}

}  // namespace dllm::testing
