#include "tokenizer/tokenizer_json.h"

#include <vector>

#include "core/error.h"
#include "io/json_file.h"

namespace dllm {

namespace {

using json = nlohmann::json;

class TokenizerJsonHandler : public nlohmann::json_sax<json> {
 public:
  TokenizerJsonHandler(TokenizerJson& out, const std::string& file) : out_(out), file_(file) {}

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return vocab_id(v);
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      return vocab_id(v > static_cast<number_unsigned_t>(INT64_MAX) ? INT64_MAX
                                                                    : static_cast<int64_t>(v));
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (mode_ == Mode::kVocab)
      fail(file_, ": model.vocab id of '", vocab_key_, "' is not an integer");
    return value(json(v));
  }
  bool binary(binary_t&) override { return value(json()); }

  bool string(string_t& s) override {
    switch (mode_) {
      case Mode::kVocab:
        fail(file_, ": model.vocab id of '", vocab_key_, "' is not an integer");
      case Mode::kMerges:
        return merge_string(s);
      case Mode::kMergePair:
        if (pair_count_ >= 2) bad_merge();
        pair_[pair_count_++] = out_.bpe.strings.add(s);
        return true;
      case Mode::kDom:
        return value(json(std::move(s)));
    }
    return true;
  }

  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    key_ = std::move(k);
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) {
      if (mode_ == Mode::kVocab)
        fail(file_, ": model.vocab id of '", vocab_key_, "' is not an integer");
      bad_merge();
    }
    if (in_model_object() && key_ == "vocab") {
      mode_ = Mode::kVocab;
      out_.has_vocab = true;
      out_.bpe.vocab.clear();
      return true;
    }
    return open(json::object());
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kVocab)
      fail(file_, ": model.vocab id of '", vocab_key_, "' is not an integer");
    if (mode_ == Mode::kMergePair) bad_merge();
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_count_ = 0;
      return true;
    }
    if (in_model_object() && key_ == "merges") {
      mode_ = Mode::kMerges;
      out_.has_merges = true;
      out_.bpe.merges.clear();
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_count_ != 2) bad_merge();
      out_.bpe.merges.push_back({pair_[0], pair_[1]});
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail(file_, ": invalid JSON: ", e.what());
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  // True while the parser is directly inside the top-level "model" object.
  bool in_model_object() const { return stack_.size() == 2 && stack_[1] == model_; }

  // Adds a value to the container being built (or makes it the document root).
  json* insert(json&& v) {
    if (stack_.empty()) {
      out_.config = std::move(v);
      return &out_.config;
    }
    json& parent = *stack_.back();
    if (parent.is_object()) {
      json& slot = parent[key_];
      slot = std::move(v);
      return &slot;
    }
    parent.push_back(std::move(v));
    return &parent.back();
  }
  bool value(json&& v) {
    insert(std::move(v));
    return true;
  }
  bool open(json&& container) {
    const bool is_model = stack_.size() == 1 && key_ == "model" && container.is_object();
    json* node = insert(std::move(container));
    if (is_model) model_ = node;
    stack_.push_back(node);
    return true;
  }

  bool vocab_id(int64_t id) {
    out_.bpe.vocab.push_back({out_.bpe.strings.add(vocab_key_), id});
    return true;
  }
  bool merge_string(const std::string& s) {
    // "left right": the first space separates the two tokens.
    const size_t space = s.find(' ');
    if (space == std::string::npos) bad_merge();
    const StringTable::Ref left = out_.bpe.strings.add(std::string_view(s).substr(0, space));
    const StringTable::Ref right = out_.bpe.strings.add(std::string_view(s).substr(space + 1));
    out_.bpe.merges.push_back({left, right});
    return true;
  }
  [[noreturn]] void bad_merge() {
    fail(file_, ": model.merges[", out_.bpe.merges.size(),
         "] must be \"left right\" or [\"left\", \"right\"]");
  }

  TokenizerJson& out_;
  const std::string& file_;
  std::vector<json*> stack_;  // containers being built, innermost last
  json* model_ = nullptr;     // the top-level "model" object once opened
  std::string key_;           // last key seen in an object being built
  std::string vocab_key_;
  Mode mode_ = Mode::kDom;
  StringTable::Ref pair_[2]{};
  int pair_count_ = 0;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& file) {
  TokenizerJson out;
  out.bpe.strings.text.reserve(text.size() / 2);
  // The SAX pass builds no deep tree itself, but the rest of the document is walked recursively
  // later (normalizer / pre-tokenizer / post-processor Sequences).
  check_json_depth(text, file, kTokenizerJsonDepthLimit);
  TokenizerJsonHandler handler(out, file);
  json::sax_parse(text.begin(), text.end(), &handler, json::input_format_t::json, true);
  return out;
}

}  // namespace dllm
