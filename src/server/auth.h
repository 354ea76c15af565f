// --api-key: requests to the API (/v1/..., /tokenize, /detokenize) must carry
// "Authorization: Bearer KEY", as OpenAI's clients send it; /health and /metrics stay open
// (probes and scrapers). Checked before routing, so a wrong key never reaches a handler.
#pragma once

#include <string>

namespace dllm::server {

bool path_needs_key(const std::string& path);
// `authorization` is the header's value ("" when absent). Compares in time independent of
// where the key differs.
bool key_matches(const std::string& authorization, const std::string& key);

}  // namespace dllm::server
