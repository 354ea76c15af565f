#include "io/json_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace dllm {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(path.string(), ": read error");
  return ss.str();
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path.string(), ": invalid JSON: ", e.what());
  }
}

std::optional<nlohmann::json> read_json_file_if_exists(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  return read_json_file(path);
}

}  // namespace dllm
