// Helpers shared by the chat-template tests: golden fixture loading and scratch directories.
#pragma once

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include "support/test_paths.h"

namespace dllm::testing {

inline std::filesystem::path chat_fixtures_dir() {
  return dllm::test::fixtures_dir() / "chat_templates";
}

// One golden case; `name` is a valid gtest parameter name.
struct GoldenCase {
  std::string name;
  nlohmann::ordered_json json;
};
inline void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << c.name;
}

// Reads fixtures/chat_templates/<file>'s "cases" (key order preserved: templates print dicts).
// A missing or broken file yields no cases; a separate test checks that the files load.
inline std::vector<GoldenCase> load_golden_cases(const std::string& file,
                                                 const std::string& prefix_key = "") {
  std::vector<GoldenCase> cases;
  std::ifstream in(chat_fixtures_dir() / file);
  if (!in) return cases;
  nlohmann::ordered_json root = nlohmann::ordered_json::parse(in, nullptr, false);
  if (root.is_discarded() || !root.contains("cases")) return cases;
  for (auto& c : root["cases"]) {
    std::string name = c["name"].get<std::string>();
    if (!prefix_key.empty()) name = c[prefix_key].get<std::string>() + "_" + name;
    cases.push_back({name, c});
  }
  return cases;
}

inline std::string write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// A fresh empty directory, removed when the object goes out of scope.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ =
        std::filesystem::temp_directory_path() /
        ("dllm_chat_template_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace dllm::testing
