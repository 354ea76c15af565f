#include "server/auth.h"

namespace dllm::server {

bool path_needs_key(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

bool key_matches(const std::string& authorization, const std::string& key) {
  const std::string prefix = "Bearer ";
  if (authorization.rfind(prefix, 0) != 0) return false;
  const std::string given = authorization.substr(prefix.size());
  unsigned diff = given.size() != key.size();
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i]) ^
            static_cast<unsigned char>(key.empty() ? 0 : key[i % key.size()]);
  return diff == 0;
}

}  // namespace dllm::server
