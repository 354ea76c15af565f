// tokenizer.json "pre_tokenizer": splits normalized text into pieces that BPE encodes separately.
// Supported: Split (Regex or String pattern; behaviors Removed, Isolated, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space, use_regex = GPT-2 regex) and
// Sequence. ByteLevel's byte -> character mapping is not done here: the BPE model works on raw
// bytes and maps its vocabulary once at load time.
#pragma once

#include <deque>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace dllm {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no pre-tokenizer: the whole text is one piece
  static PreTokenizer from_json(const nlohmann::json& spec, const std::string& file);

  // Appends the non-empty pieces of `text`. Pieces view `text` or strings kept in `storage`
  // (ByteLevel's add_prefix_space makes new strings); both must outlive the pieces.
  void split(std::string_view text, std::vector<std::string_view>& pieces,
             std::deque<std::string>& storage) const;

  bool has_byte_level() const { return has_byte_level_; }

 private:
  struct Step {
    enum class Kind { kSplit, kByteLevel } kind;
    std::shared_ptr<const Regex> regex;  // kSplit with a Regex pattern; kByteLevel with use_regex
    std::string literal;                 // kSplit with a String pattern
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
  };
  static void add_steps(const nlohmann::json& spec, const std::string& file,
                        std::vector<Step>& steps);
  static void apply(const Step& step, std::string_view piece, std::vector<std::string_view>& out,
                    std::deque<std::string>& storage);

  std::vector<Step> steps_;
  bool has_byte_level_ = false;
};

// Splits `text` around `matches` (sorted, non-overlapping) the way Hugging Face's
// NormalizedString::split does for `behavior`, appending the non-empty pieces. Exposed for tests.
void split_on_matches(std::string_view text, const std::vector<Regex::Match>& matches,
                      SplitBehavior behavior, bool invert, std::vector<std::string_view>& out);

}  // namespace dllm
