#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace dllm {

namespace {

struct Span {
  size_t start, end;
  bool is_match;
};

SplitBehavior parse_behavior(const nlohmann::json& spec, const std::string& file) {
  if (!spec.contains("behavior") || !spec["behavior"].is_string())
    fail(file, ": pre_tokenizer Split needs a string \"behavior\"");
  const std::string b = spec["behavior"].get<std::string>();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail(file, ": pre_tokenizer Split behavior '", b, "' is not supported");
}

bool bool_field(const nlohmann::json& spec, const char* name, bool fallback,
                const std::string& file, const char* where) {
  if (!spec.contains(name) || spec[name].is_null()) return fallback;
  if (!spec[name].is_boolean()) fail(file, ": ", where, " field \"", name, "\" must be a boolean");
  return spec[name].get<bool>();
}

void find_literal(std::string_view text, std::string_view literal, std::vector<Regex::Match>& out) {
  size_t pos = 0;
  while ((pos = text.find(literal, pos)) != std::string_view::npos) {
    out.push_back({pos, pos + literal.size()});
    pos += literal.size();
  }
}

}  // namespace

void split_on_matches(std::string_view text, const std::vector<Regex::Match>& matches,
                      SplitBehavior behavior, bool invert, std::vector<std::string_view>& out) {
  if (behavior == SplitBehavior::kIsolated) {
    // The common case (Qwen, GPT-2): every match and every gap is a piece.
    size_t prev = 0;
    for (const Regex::Match& m : matches) {
      if (prev != m.start) out.push_back(text.substr(prev, m.start - prev));
      if (m.end != m.start) out.push_back(text.substr(m.start, m.end - m.start));
      prev = m.end;
    }
    if (prev != text.size()) out.push_back(text.substr(prev));
    return;
  }
  // Same steps as Hugging Face: cover the text with (span, is_match) ...
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const Regex::Match& m : matches) {
    if (prev != m.start) spans.push_back({prev, m.start, invert});
    spans.push_back({m.start, m.end, !invert});
    prev = m.end;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});

  // ... then fold the spans according to the behavior (is_match afterwards means "remove").
  std::vector<Span> pieces;
  pieces.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) pieces.push_back({s.start, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      pieces = spans;
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty()) {
          pieces.back().start = it->start;
        } else {
          pieces.push_back({it->start, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
  }
  for (const Span& p : pieces) {
    if (!p.is_match && p.end > p.start) out.push_back(text.substr(p.start, p.end - p.start));
  }
}

void PreTokenizer::add_steps(const nlohmann::json& spec, const std::string& file,
                             std::vector<Step>& steps) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    fail(file, ": pre_tokenizer must be an object with a string \"type\"");
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    if (!spec.contains("pretokenizers") || !spec["pretokenizers"].is_array())
      fail(file, ": pre_tokenizer Sequence needs a \"pretokenizers\" array");
    for (const auto& child : spec["pretokenizers"]) add_steps(child, file, steps);
    return;
  }
  Step step;
  if (type == "Split") {
    step.kind = Step::Kind::kSplit;
    if (!spec.contains("pattern") || !spec["pattern"].is_object())
      fail(file, ": pre_tokenizer Split needs a \"pattern\" object");
    const auto& pattern = spec["pattern"];
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      try {
        step.regex = std::make_shared<const Regex>(pattern["Regex"].get<std::string>());
      } catch (const Error& e) {
        fail(file, ": pre_tokenizer Split: ", e.what());
      }
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      step.literal = pattern["String"].get<std::string>();
    } else {
      fail(file, ": pre_tokenizer Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    step.behavior = parse_behavior(spec, file);
    step.invert = bool_field(spec, "invert", false, file, "pre_tokenizer Split");
  } else if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    step.add_prefix_space = bool_field(spec, "add_prefix_space", true, file, "ByteLevel");
    if (bool_field(spec, "use_regex", true, file, "ByteLevel")) {
      static const auto gpt2 = std::make_shared<const Regex>(kGpt2SplitPattern);
      step.regex = gpt2;
    }
  } else {
    fail(file, ": pre_tokenizer type '", type,
         "' is not supported (supported: Split, ByteLevel, Sequence)");
  }
  steps.push_back(std::move(step));
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& spec, const std::string& file) {
  PreTokenizer p;
  if (spec.is_null()) return p;
  add_steps(spec, file, p.steps_);
  for (const Step& s : p.steps_) {
    if (s.kind == Step::Kind::kByteLevel) {
      p.has_byte_level_ = true;
    } else if (p.has_byte_level_) {
      // After ByteLevel, Hugging Face matches on the byte-level spelling ('Ġ' for space); we keep
      // raw bytes, so such a pattern would see different text.
      fail(file, ": pre_tokenizer Split after ByteLevel is not supported");
    }
  }
  // A ByteLevel step without prefix space and regex leaves the pieces as they are.
  std::erase_if(p.steps_, [](const Step& s) {
    return s.kind == Step::Kind::kByteLevel && !s.add_prefix_space && !s.regex;
  });
  return p;
}

void PreTokenizer::apply(const Step& step, std::string_view piece,
                         std::vector<std::string_view>& out, std::deque<std::string>& storage) {
  // Reused across calls; a huge input's buffer is not kept (threads of a server live long).
  thread_local std::vector<Regex::Match> matches;
  matches.clear();
  if (matches.capacity() > (size_t{1} << 16)) matches.shrink_to_fit();
  if (step.kind == Step::Kind::kByteLevel) {
    if (step.add_prefix_space && piece.front() != ' ') {
      storage.push_back(" ");
      storage.back().append(piece);
      piece = storage.back();
    }
    if (!step.regex) {
      out.push_back(piece);
      return;
    }
    step.regex->find_all(piece, matches);
    split_on_matches(piece, matches, SplitBehavior::kIsolated, false, out);
    return;
  }
  if (step.regex) {
    step.regex->find_all(piece, matches);
  } else if (!step.literal.empty()) {
    find_literal(piece, step.literal, matches);
  }
  split_on_matches(piece, matches, step.behavior, step.invert, out);
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces,
                         std::deque<std::string>& storage) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    pieces.push_back(text);
    return;
  }
  if (steps_.size() == 1) {
    apply(steps_[0], text, pieces, storage);
    return;
  }
  std::vector<std::string_view> current{text}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : current) apply(step, piece, next, storage);
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace dllm
