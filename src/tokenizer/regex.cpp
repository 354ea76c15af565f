#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dllm {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread match state, reused across calls: match data (only the whole-match pair is read) and a
// JIT stack large enough for long runs such as `\s+(?!\S)` over megabytes of spaces.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string onig_to_pcre2_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '\\' || i + 1 == p.size()) {
      out += p[i];
      continue;
    }
    const char next = p[i + 1];
    if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else {
      out += p[i];
      out += next;  // keep any other escape (including "\\\\") intact
    }
    ++i;
  }
  return out;
}

Regex::Regex(std::string_view onig_pattern) : pattern_(onig_pattern) {
  const std::string translated = onig_to_pcre2_pattern(onig_pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code_ == nullptr) {
    fail("regex '", pattern_, "' does not compile: ", pcre2_message(error), " (offset ",
         error_offset, ")");
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  pcre2_code_free(code_);
}

void Regex::find_all(std::string_view subject, std::vector<Match>& out) const {
  ThreadMatchState& state = thread_match_state();
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t n = subject.size();
  size_t search_from = 0;
  size_t last_match_end = std::string_view::npos;
  while (search_from <= n) {
    const int rc = jit_ ? pcre2_jit_match(code_, text, n, search_from, 0, state.data, state.context)
                        : pcre2_match(code_, text, n, search_from, PCRE2_NO_UTF_CHECK, state.data,
                                      state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("regex '", pattern_, "' failed on the input: ", pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t start = ovector[0], end = ovector[1];
    if (start == end && end == last_match_end) {
      // Empty match where the last one ended: step one character forward and search again.
      if (search_from == n) break;
      const size_t len = utf8::sequence_length(subject, search_from);
      search_from += len == 0 ? 1 : len;
      continue;
    }
    out.push_back({start, end});
    search_from = end;
    last_match_end = end;
  }
}

}  // namespace dllm
