// Compiled PCRE2 regex for pre-tokenizer patterns written for Oniguruma (the engine Hugging Face
// tokenizers uses). Compiled once at load time, JIT when available, UTF + Unicode properties.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace dllm {

class Regex {
 public:
  struct Match {
    size_t start, end;  // byte offsets into the subject
  };

  // Throws dllm::Error (without file context; callers add it) if the pattern does not compile.
  explicit Regex(std::string_view onig_pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every match in `subject`, left to right, non-overlapping. An empty match right where
  // the previous match ended is skipped, as Oniguruma's find_iter does. The subject must be valid
  // UTF-8 (not re-checked here).
  void find_all(std::string_view subject, std::vector<Match>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;  // as written in tokenizer.json
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

// Rewrites the Oniguruma constructs whose PCRE2 meaning differs: `\s` / `\S` become the Unicode
// White_Space property (PCRE2's \s also takes U+180E and differs in other corners). Exposed for
// tests.
std::string onig_to_pcre2_pattern(std::string_view onig_pattern);

}  // namespace dllm
