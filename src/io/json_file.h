// Untrusted JSON and text: every JSON document the project reads (config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// model.safetensors.index.json, safetensors headers, chat-template messages files, HTTP request
// bodies) goes through these helpers, so that each gets the same three guarantees:
//
//  1. Only regular files are read. A FIFO, socket, device or directory where a file should be
//     gives "<path>: not a regular file (...)" at once instead of blocking in open() or reading
//     forever (/dev/zero). Files are opened with O_NONBLOCK and checked with fstat first.
//  2. Sizes are bounded: a text/JSON file larger than kMaxTextFileBytes (1 GiB) is refused with
//     an error naming the file and both sizes, not a bad_alloc.
//  3. Nesting is bounded: JSON nested deeper than the caller's limit is refused before any tree is
//     built, with the line, column and byte offset of the first bracket past the limit. Deep
//     nesting is never legitimate in these files and would otherwise overflow the stack of the
//     recursive code that walks the tree (dump, comparisons, template values).
//       kJsonDepthLimit          = 64   request bodies, messages files, config files, indexes
//       kTokenizerJsonDepthLimit = 128  tokenizer.json (real ones nest ~6 deep; normalizer and
//                                       pre-tokenizer Sequences may nest a few levels more)
//
// Syntax errors read "<source>: invalid JSON at line L, column C (byte B): <what is wrong>".
// `source` is a file path or any name the caller chooses ("request body", "messages file x").
//
//   const nlohmann::json config = read_json_file(dir / "config.json");
//   const auto body = parse_json_text<nlohmann::ordered_json>(text, "request body");
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace dllm {

inline constexpr int kJsonDepthLimit = 64;
inline constexpr int kTokenizerJsonDepthLimit = 128;
inline constexpr size_t kMaxTextFileBytes = size_t{1} << 30;

// Throws dllm::Error naming `source`, the position and the limit when `text` has a `[` or `{`
// nested deeper than `max_depth` (the top-level container is depth 1). Linear, no allocation;
// for SAX parsers that never build a tree (tokenizer.json).
void check_json_depth(std::string_view text, const std::string& source, int max_depth);

// Parses JSON text into nlohmann::json (keys sorted) or nlohmann::ordered_json (key order kept,
// which chat templates need). Checks the depth first; errors as described above.
template <class Json = nlohmann::json>
Json parse_json_text(std::string_view text, const std::string& source,
                     int max_depth = kJsonDepthLimit);
extern template nlohmann::json parse_json_text<nlohmann::json>(std::string_view, const std::string&,
                                                               int);
extern template nlohmann::ordered_json parse_json_text<nlohmann::ordered_json>(std::string_view,
                                                                               const std::string&,
                                                                               int);

// Reads and parses a whole JSON file (regular files only, at most kMaxTextFileBytes).
nlohmann::json read_json_file(const std::filesystem::path& path, int max_depth = kJsonDepthLimit);
// Same, but returns nullopt when nothing exists at `path` (something that is not a regular file
// is still an error).
std::optional<nlohmann::json> read_json_file_if_exists(const std::filesystem::path& path,
                                                       int max_depth = kJsonDepthLimit);
// Reads a whole regular file into a string; errors name the file. `max_bytes` bounds the size.
std::string read_text_file(const std::filesystem::path& path, size_t max_bytes = kMaxTextFileBytes);

}  // namespace dllm
