#include "io/json_file.h"

#include <system_error>

#include "core/error.h"
#include "io/regular_file.h"

namespace dllm {

namespace {

struct TextPosition {
  size_t line = 1, column = 1;
};

// 1-based line and column (in bytes) of `offset`, for error messages.
TextPosition position_of(std::string_view text, size_t offset) {
  TextPosition p;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

// nlohmann's message is "[json.exception.parse_error.101] parse error at line 1, column 2: why";
// keep only "why" (we print our own position, which also names the byte offset).
std::string parse_error_reason(const std::string& what) {
  const size_t column = what.find("column ");
  const size_t colon = what.find(": ", column == std::string::npos ? 0 : column);
  if (colon != std::string::npos) return what.substr(colon + 2);
  const size_t tag = what.find("] ");  // "[json.exception.out_of_range.406] number overflow ..."
  return tag == std::string::npos ? what : what.substr(tag + 2);
}

}  // namespace

void check_json_depth(std::string_view text, const std::string& source, int max_depth) {
  // Brackets inside strings do not count; escapes inside strings are skipped. The text may be
  // invalid JSON: then the parser reports it, this only guards the depth.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        const TextPosition p = position_of(text, i);
        fail(source, ": JSON nested deeper than ", max_depth, " levels at line ", p.line,
             ", column ", p.column, " (byte ", i, "); the accepted nesting depth is 1..",
             max_depth);
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

template <class Json>
Json parse_json_text(std::string_view text, const std::string& source, int max_depth) {
  check_json_depth(text, source, max_depth);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the position just after the offending character.
    const size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    const TextPosition p = position_of(text, offset);
    fail(source, ": invalid JSON at line ", p.line, ", column ", p.column, " (byte ", offset,
         "): ", parse_error_reason(e.what()));
  } catch (const nlohmann::json::exception& e) {
    // out_of_range 406: a number too large for a double ("1e400").
    fail(source, ": invalid JSON: ", parse_error_reason(e.what()));
  }
}

template nlohmann::json parse_json_text<nlohmann::json>(std::string_view, const std::string&, int);
template nlohmann::ordered_json parse_json_text<nlohmann::ordered_json>(std::string_view,
                                                                        const std::string&, int);

std::string read_text_file(const std::filesystem::path& path, size_t max_bytes) {
  const RegularFile file(path);
  if (file.size() > max_bytes)
    fail(path.string(), ": file is ", file.size(), " bytes; at most ", max_bytes,
         " bytes are accepted");
  return file.read_all();
}

nlohmann::json read_json_file(const std::filesystem::path& path, int max_depth) {
  return parse_json_text(read_text_file(path), path.string(), max_depth);
}

std::optional<nlohmann::json> read_json_file_if_exists(const std::filesystem::path& path,
                                                       int max_depth) {
  std::error_code ec;
  // symlink_status: a dangling link is "something there" and gets read_text_file's error.
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return std::nullopt;
  return read_json_file(path, max_depth);
}

}  // namespace dllm
