// Resource limits of one chat-template render. A chat template is code from a checkpoint (or a
// request) and runs on the server's thread: whatever it does, a render ends quickly with bounded
// memory, or fails with a TemplateError naming the limit ("template limit max_steps (2000000)
// exceeded"). Real chat templates stay orders of magnitude below every limit; the numbers are in
// docs/hostile-input.md and README.
//
//   max_steps            statements run + expressions evaluated + loop iterations, plus the
//                        element work of list builtins that are quadratic (`in` on a list,
//                        unique, dict(pairs))
//   max_processed_bytes  bytes of all strings (and list slots) that expressions produce or read;
//                        bounds the work of string operations in loops ('x' ~ s, s|length, ...)
//   max_string_bytes     any one string value, and the rendered output
//   max_list_items       any one list value
//   max_macro_depth      nested macro calls (a macro calling itself)
//   max_range            range() length (jinja2's sandbox MAX_RANGE)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dllm::jinja {

inline constexpr int64_t kMaxSteps = 2'000'000;
inline constexpr int64_t kMaxProcessedBytes = int64_t{2} << 30;
inline constexpr size_t kMaxStringBytes = size_t{32} << 20;
inline constexpr size_t kMaxListItems = size_t{1} << 20;
inline constexpr int kMaxMacroDepth = 100;
inline constexpr int64_t kMaxRange = 100000;

// Throw TemplateError naming the limit when `bytes` / `items` (of something about to be built,
// described by `what`) exceed it. Pre-checks for builtins that amplify their input (s * n,
// replace, indent, join, printf widths, tojson), so nothing huge is allocated first.
void check_string_bytes(uint64_t bytes, std::string_view what);
void check_list_items(uint64_t items, std::string_view what);

}  // namespace dllm::jinja
